package labels

import (
	"context"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// node builds the Input of a test node.
type node struct {
	in *Input
}

// newNode returns n GPUs of one model, fully connected by NVLink with
// nvlinks links per pair (none when nvlinks is 0), half on each NUMA node.
func newNode(model string, arch gpu.Architecture, cc gpu.ComputeCapability, memMiB uint64, n, nvlinks int) *node {
	in := &Input{
		System:   gpu.SystemInfo{DriverVersion: "550.54.15", CUDADriverVersion: 12040, NVMLVersion: "12.550.54.15", Hostname: "node-a"},
		Topology: gpu.NewTopology(n),
	}
	for i := range n {
		in.Devices = append(in.Devices, gpu.Device{
			Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i),
			Name: model, Brand: "Nvidia", Architecture: arch, ComputeCapability: cc, MemoryMiB: memMiB,
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10), NUMANode: i * 2 / n,
			MIG: gpu.MIGMode{Capable: arch == gpu.ArchAmpere || arch == gpu.ArchHopper},
		})
		for j := range i {
			l := gpu.Link{PCIe: gpu.PCIeSystem, NVLinks: nvlinks}
			in.Topology.Set(i, j, l)
		}
	}
	return &node{in: in}
}

func dgxH100() *node {
	return newNode("NVIDIA H100 80GB HBM3", gpu.ArchHopper, gpu.ComputeCapability{Major: 9}, 81559, 8, 18)
}

func dgxA100() *node {
	return newNode("NVIDIA A100-SXM4-40GB", gpu.ArchAmpere, gpu.ComputeCapability{Major: 8}, 40960, 8, 12)
}

// mig puts GPU i in MIG mode with count MIG devices of one A100 40GB
// profile ("1g.5gb", "2g.10gb", "3g.20gb" or "7g.40gb").
func (n *node) mig(i int, profile string, count int) *node {
	shapes := map[string]gpu.MIGDevice{
		"1g.5gb":  {MemoryMiB: 4864, MultiprocessorCount: 14, GPUSlices: 1, ComputeSlices: 1, Engines: gpu.Engines{Copy: 1, Decoder: 0, JPEG: 0}},
		"2g.10gb": {MemoryMiB: 9856, MultiprocessorCount: 28, GPUSlices: 2, ComputeSlices: 2, Engines: gpu.Engines{Copy: 2, Decoder: 1}},
		"3g.20gb": {MemoryMiB: 19968, MultiprocessorCount: 42, GPUSlices: 3, ComputeSlices: 3, Engines: gpu.Engines{Copy: 3, Decoder: 2}},
		"7g.40gb": {MemoryMiB: 40192, MultiprocessorCount: 98, GPUSlices: 7, ComputeSlices: 7, Engines: gpu.Engines{Copy: 7, Decoder: 5, JPEG: 1, OFA: 1}},
	}
	d := &n.in.Devices[i]
	d.MIG.Current = true
	for k := range count {
		m := shapes[profile]
		m.Profile = profile
		m.ParentIndex, m.ParentUUID = i, d.UUID
		m.GPUInstanceID, m.ComputeInstanceID = k+1, 0
		m.UUID = fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", i, k)
		d.MIGDevices = append(d.MIGDevices, m)
	}
	return n
}

// fakeInventory serves a fixed Input as a gpu.Inventory, failing while
// err is set.
type fakeInventory struct {
	in  *Input
	err error
}

var _ gpu.Inventory = (*fakeInventory)(nil)

func (f *fakeInventory) System(context.Context) (gpu.SystemInfo, error) { return f.in.System, f.err }
func (f *fakeInventory) Devices(context.Context) ([]gpu.Device, error)  { return f.in.Devices, f.err }
func (f *fakeInventory) Topology(context.Context) (*gpu.Topology, error) {
	return f.in.Topology, f.err
}

func chainLink(n int) gpu.Link { return gpu.Link{NVLinks: n, PCIe: gpu.PCIeSystem} }

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
