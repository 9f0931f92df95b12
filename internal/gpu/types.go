package gpu

import (
	"fmt"
	"strings"
)

// Architecture is a GPU's architecture family, lower-case as GPU Feature
// Discovery writes it into nvidia.com/gpu.family.
type Architecture string

// Architecture families known to gpuplane.
const (
	ArchKepler    Architecture = "kepler"
	ArchMaxwell   Architecture = "maxwell"
	ArchPascal    Architecture = "pascal"
	ArchVolta     Architecture = "volta"
	ArchTuring    Architecture = "turing"
	ArchAmpere    Architecture = "ampere"
	ArchAda       Architecture = "ada-lovelace"
	ArchHopper    Architecture = "hopper"
	ArchBlackwell Architecture = "blackwell"
	ArchUnknown   Architecture = "undefined"
)

// Architectures lists the known families, oldest first.
var Architectures = []Architecture{ArchKepler, ArchMaxwell, ArchPascal, ArchVolta, ArchTuring, ArchAmpere, ArchAda, ArchHopper, ArchBlackwell}

// ParseArchitecture maps a family name (any case, "ada" accepted for
// ada-lovelace) to an Architecture.
func ParseArchitecture(s string) (Architecture, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "ada" {
		return ArchAda, nil
	}
	for _, a := range Architectures {
		if string(a) == s {
			return a, nil
		}
	}
	names := make([]string, len(Architectures))
	for i, a := range Architectures {
		names[i] = string(a)
	}
	return ArchUnknown, fmt.Errorf("unknown architecture %q (want one of %s)", s, strings.Join(names, ", "))
}

// ComputeCapability is a CUDA compute capability such as 9.0.
type ComputeCapability struct {
	Major int `json:"major"`
	Minor int `json:"minor"`
}

func (c ComputeCapability) String() string { return fmt.Sprintf("%d.%d", c.Major, c.Minor) }

// CUDAVersion is a CUDA version as NVML encodes it (12040 is 12.4).
type CUDAVersion int

// Major returns the major version.
func (v CUDAVersion) Major() int { return int(v) / 1000 }

// Minor returns the minor version.
func (v CUDAVersion) Minor() int { return int(v) % 1000 / 10 }

func (v CUDAVersion) String() string { return fmt.Sprintf("%d.%d", v.Major(), v.Minor()) }

// SystemInfo describes the driver stack of a node.
type SystemInfo struct {
	DriverVersion     string      `json:"driverVersion"`
	CUDADriverVersion CUDAVersion `json:"cudaDriverVersion"`
	NVMLVersion       string      `json:"nvmlVersion"`
	// Hostname is the node name the backend was built for (sim) or the
	// machine's host name (nvml). Metrics use it as their Hostname label.
	Hostname string `json:"hostname,omitempty"`
}

// MIGMode is a GPU's MIG state. Changing the mode takes effect after a GPU
// reset, so Current and Pending can differ.
type MIGMode struct {
	Capable bool `json:"capable"`
	Current bool `json:"current"`
	Pending bool `json:"pending"`
}

// Device is one physical GPU as the inventory reports it.
type Device struct {
	Index             int               `json:"index"`
	Minor             int               `json:"minor"`
	UUID              string            `json:"uuid"`
	Name              string            `json:"name"`
	Brand             string            `json:"brand"`
	Architecture      Architecture      `json:"architecture"`
	ComputeCapability ComputeCapability `json:"computeCapability"`
	MemoryMiB         uint64            `json:"memoryMiB"`
	// ReservedMiB is the part of MemoryMiB the driver keeps for itself:
	// processes can never allocate it, so what a GPU can give pods is
	// MemoryMiB - ReservedMiB. 0 when the driver does not say.
	ReservedMiB uint64 `json:"reservedMiB,omitempty"`
	PCIBusID    string `json:"pciBusID"`
	// PCIDeviceID is the PCI device and vendor ID as NVML reports it,
	// device in the high 16 bits and vendor in the low (0x233010DE for an
	// H100 SXM5 80GB): what mig-parted's device-filter matches.
	PCIDeviceID uint32 `json:"pciDeviceID,omitempty"`
	// NUMANode is the NUMA node the GPU is attached to, or -1 when the
	// platform does not say.
	NUMANode   int         `json:"numaNode"`
	MIG        MIGMode     `json:"mig"`
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`
}

// Path is the device node of the GPU, /dev/nvidiaN.
func (d *Device) Path() string { return fmt.Sprintf("/dev/nvidia%d", d.Minor) }

// Placement is where a MIG instance sits among a GPU's memory slices.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Overlaps reports whether two placements share a slice.
func (p Placement) Overlaps(q Placement) bool {
	return p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

// Engines counts the media and copy engines of a MIG profile.
type Engines struct {
	Copy    int `json:"copy"`
	Decoder int `json:"decoder"`
	Encoder int `json:"encoder"`
	JPEG    int `json:"jpeg"`
	OFA     int `json:"ofa"`
}

// MIGProfile is a GPU instance profile a GPU supports, such as 1g.10gb, with
// the placements it may take.
type MIGProfile struct {
	// Name is the canonical profile name, e.g. "1g.10gb" or "1g.10gb+me".
	Name string `json:"name"`
	// ID is NVML's GPU instance profile ID.
	ID                  int         `json:"id"`
	SliceCount          int         `json:"sliceCount"`
	InstanceCount       int         `json:"instanceCount"`
	MemoryMiB           uint64      `json:"memoryMiB"`
	MultiprocessorCount int         `json:"multiprocessorCount"`
	Engines             Engines     `json:"engines"`
	Placements          []Placement `json:"placements"`
}

// MIGDevice is one MIG device (a GPU instance with a compute instance).
type MIGDevice struct {
	UUID        string `json:"uuid"`
	ParentIndex int    `json:"parentIndex"`
	ParentUUID  string `json:"parentUUID"`
	// Profile is the MIG device's name as resources use it: the GPU
	// instance profile ("1g.10gb") when the compute instance spans the whole
	// GPU instance, otherwise "<c>c.<g>g.<mem>gb".
	Profile             string    `json:"profile"`
	GPUInstanceID       int       `json:"gpuInstanceID"`
	ComputeInstanceID   int       `json:"computeInstanceID"`
	GPUInstanceProfile  int       `json:"gpuInstanceProfileID"`
	Placement           Placement `json:"placement"`
	MemoryMiB           uint64    `json:"memoryMiB"`
	MultiprocessorCount int       `json:"multiprocessorCount"`
	// GPUSlices and ComputeSlices are the GPU and compute slice counts that
	// the nvidia.com/mig-*.slices.gi and .slices.ci labels show.
	GPUSlices     int     `json:"gpuSlices"`
	ComputeSlices int     `json:"computeSlices"`
	Engines       Engines `json:"engines"`
}

// GPUInstance is a MIG GPU instance, with or without compute instances.
type GPUInstance struct {
	ID        int       `json:"id"`
	Profile   string    `json:"profile"`
	ProfileID int       `json:"profileID"`
	Placement Placement `json:"placement"`
}

// ComputeInstance is a MIG compute instance inside a GPU instance.
type ComputeInstance struct {
	ID            int    `json:"id"`
	GPUInstanceID int    `json:"gpuInstanceID"`
	Profile       string `json:"profile"`
	ProfileID     int    `json:"profileID"`
	UUID          string `json:"uuid"`
}
