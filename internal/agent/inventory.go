package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/backends"
)

// Inventory is everything `gpuplane-agent inventory` reports about a node.
type Inventory struct {
	Backend  string         `json:"backend"`
	System   gpu.SystemInfo `json:"system"`
	Devices  []gpu.Device   `json:"devices"`
	Topology *gpu.Topology  `json:"topology"`
}

// ReadInventory collects a node's inventory from a backend.
func ReadInventory(ctx context.Context, b gpu.Backend) (*Inventory, error) {
	inv := &Inventory{Backend: b.Name()}
	var err error
	if inv.System, err = b.System(ctx); err != nil {
		return nil, fmt.Errorf("reading driver versions: %w", err)
	}
	if inv.Devices, err = b.Devices(ctx); err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	if inv.Topology, err = b.Topology(ctx); err != nil {
		return nil, fmt.Errorf("reading GPU topology: %w", err)
	}
	return inv, nil
}

func newInventoryCommand() *cobra.Command {
	var (
		bo     backends.Options
		output *cliutil.Format
	)
	cmd := &cobra.Command{
		Use:   "inventory",
		Short: "print the node's GPUs, their MIG devices and the topology matrix",
		Long: `Print what the agent sees on this node: driver versions, every GPU with its
MIG devices, and the GPU-to-GPU topology as nvidia-smi topo -m shows it
(NV<n>: n NVLinks; PIX, PXB, PHB, NODE, SYS: PCIe paths from closest to farthest).

Without --simulate the GPUs are read through NVML; on a machine without the
NVIDIA driver the command exits 1 and says what is missing.`,
		Example: `  gpuplane-agent inventory --simulate dgxh100
  gpuplane-agent inventory --simulate dgxa100 -o json
  gpuplane-agent inventory --simulate ./two-t4.yaml -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := *output
			bo.FailOnInitError = true
			b, err := backends.Open(cmd.Context(), bo)
			if errors.Is(err, backends.ErrUnknownProfile) {
				return &cliutil.UsageError{Err: err}
			}
			if err != nil {
				return err
			}
			defer b.Close()
			inv, err := ReadInventory(cmd.Context(), b)
			if err != nil {
				return err
			}
			if format.Data() {
				return cliutil.Encode(cmd.OutOrStdout(), format, inv)
			}
			return writeInventoryTable(cmd.OutOrStdout(), inv, format == cliutil.Wide)
		},
	}
	backends.AddFlags(cmd.Flags(), &bo)
	output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds each GPU's device node, PCI device ID and the memory the driver reserves")
	return cmd
}

func writeInventoryTable(w io.Writer, inv *Inventory, wide bool) error {
	s := inv.System
	fmt.Fprintf(w, "Node %s (%s): driver %s, CUDA %s, NVML %s\n\n", s.Hostname, inv.Backend, s.DriverVersion, s.CUDADriverVersion, s.NVMLVersion)
	if len(inv.Devices) == 0 {
		fmt.Fprintln(w, "No GPUs.")
		return nil
	}
	tw := cliutil.NewTable(w)
	head := "GPU\tNAME\tMEMORY\tARCH\tCC\tPCI BUS\tNUMA\tMIG\tUUID"
	if wide {
		head += "\tDEVICE\tPCI ID\tRESERVED"
	}
	fmt.Fprintln(tw, head)
	for _, d := range inv.Devices {
		fmt.Fprintf(tw, "%d\t%s\t%d MiB\t%s\t%s\t%s\t%s\t%s\t%s", d.Index, d.Name, d.MemoryMiB, d.Architecture,
			d.ComputeCapability, d.PCIBusID, numa(d.NUMANode), migState(d.MIG), d.UUID)
		if wide {
			fmt.Fprintf(tw, "\t%s\t%#08x\t%d MiB", d.Path(), d.PCIDeviceID, d.ReservedMiB)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var migs []gpu.MIGDevice
	for _, d := range inv.Devices {
		migs = append(migs, d.MIGDevices...)
	}
	if len(migs) > 0 {
		sort.SliceStable(migs, func(i, j int) bool { return migs[i].ParentIndex < migs[j].ParentIndex })
		fmt.Fprintln(w, "\nMIG devices:")
		tw = cliutil.NewTable(w)
		fmt.Fprintln(tw, "GPU\tGI\tCI\tPROFILE\tMEMORY\tSMS\tPLACEMENT\tUUID")
		for _, m := range migs {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d MiB\t%d\t%d+%d\t%s\n", m.ParentIndex, m.GPUInstanceID, m.ComputeInstanceID,
				m.Profile, m.MemoryMiB, m.MultiprocessorCount, m.Placement.Start, m.Placement.Size, m.UUID)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nTopology:")
	tw = cliutil.NewTable(w)
	header := []string{""}
	for _, d := range inv.Devices {
		header = append(header, fmt.Sprintf("GPU%d", d.Index))
	}
	header = append(header, "NUMA")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i, row := range inv.Topology.Matrix() {
		fmt.Fprintf(tw, "GPU%d\t%s\t%s\n", i, strings.Join(row, "\t"), numa(inv.Devices[i].NUMANode))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nLegend: X self; NV<n> n NVLinks; PIX one PCIe switch; PXB several switches; PHB host bridge;")
	fmt.Fprintln(w, "        NODE host bridges in one NUMA node; SYS across NUMA nodes; ? unknown")
	return nil
}

func numa(n int) string {
	if n < 0 {
		return "N/A"
	}
	return fmt.Sprint(n)
}

func migState(m gpu.MIGMode) string {
	switch {
	case !m.Capable:
		return "N/A"
	case m.Current != m.Pending:
		return fmt.Sprintf("%s (pending %s)", onOff(m.Current), onOff(m.Pending))
	}
	return onOff(m.Current)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
