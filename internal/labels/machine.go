package labels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MachineLabeler labels nvidia.com/gpu.machine, the machine's product name
// from DMI ("DGXH100"), and nvidia.com/gpu.mode, which is "compute" when
// every GPU is a 3D controller on the PCI bus, "graphics" when one is a VGA
// controller and "unknown" when the PCI class cannot be read.
type MachineLabeler struct {
	machineFile string
	sysfsRoot   string
}

var _ Labeler = (*MachineLabeler)(nil)

// NewMachineLabeler returns a MachineLabeler reading the DMI product name
// from machineFile and PCI classes below sysfsRoot.
func NewMachineLabeler(machineFile, sysfsRoot string) (*MachineLabeler, error) {
	if machineFile == "" {
		return nil, errors.New("machine labeler: the machine type file path is empty")
	}
	if sysfsRoot == "" {
		return nil, errors.New("machine labeler: the sysfs root is empty")
	}
	return &MachineLabeler{machineFile: machineFile, sysfsRoot: sysfsRoot}, nil
}

// Name implements Labeler.
func (*MachineLabeler) Name() string { return "machine" }

// Label implements Labeler.
func (m *MachineLabeler) Label(in *Input, out Labels) error {
	machine := "unknown"
	if b, err := os.ReadFile(m.machineFile); err == nil {
		if v := productName(string(b)); v != "" {
			machine = v
		}
	}
	out[Prefix+"gpu.machine"] = machine
	if len(in.Devices) == 0 {
		return nil
	}
	mode := "compute"
	for i := range in.Devices {
		switch m.pciClass(in.Devices[i].PCIBusID) {
		case "0x0302":
		case "0x0300":
			mode = "graphics"
		default:
			out[Prefix+"gpu.mode"] = "unknown"
			return nil
		}
	}
	out[Prefix+"gpu.mode"] = mode
	return nil
}

// pciClass returns the class and subclass of a PCI device, "0x0302" for a
// 3D controller, or "" when unreadable. NVML writes bus IDs with an
// eight-digit domain; sysfs uses four.
func (m *MachineLabeler) pciClass(busID string) string {
	id := strings.ToLower(busID)
	if len(id) == len("00000000:00:00.0") {
		id = id[4:]
	}
	b, err := os.ReadFile(filepath.Join(m.sysfsRoot, "bus", "pci", "devices", id, "class"))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) < len("0x0302") {
		return ""
	}
	return fmt.Sprintf("%.6s", s)
}
