package dra

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// device is one device the driver publishes: a whole GPU or a MIG profile
// at one placement on a GPU in MIG mode.
type device struct {
	// name is the device's name in the pool ("gpu-0", "gpu-0-mig-1g-10gb-3-1").
	name string
	// gpu is the physical GPU.
	gpu *gpu.Device
	// mig is set for a MIG device: its profile and placement.
	mig *migSpot
	// attrs and capacity are published as they are.
	attrs    map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	capacity map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	// multi publishes the device with allowMultipleAllocations: claims
	// take shares of its capacity (capacity.go).
	multi *bool
}

// migSpot is a MIG profile at one placement, and the instance that sits
// there already (static layout), if any.
type migSpot struct {
	profile   gpu.MIGProfile
	placement gpu.Placement
	// static is the MIG device of this exact profile and placement that
	// existed when the driver started (a layout applied by mig-parted or
	// the agent's MIG manager), or nil: then prepare creates it.
	static *gpu.MIGDevice
	// blockedBy is a static instance this spot overlaps without being it:
	// the spot cannot be created while that instance exists.
	blockedBy *gpu.MIGDevice
}

// inventory is the node's GPUs as the driver publishes them.
type inventory struct {
	gpus    []gpu.Device
	devices []*device
	byName  map[string]*device
	// counters are the shared counter sets of the GPUs in MIG mode.
	counters []resourceapi.CounterSet
	// memSlices is each MIG GPU's memory slice count, by GPU index.
	memSlices map[int]int
}

// gpuName is a whole GPU's device name.
func gpuName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// migName is a MIG device's name: the GPU, the profile with its dots and
// plus signs as dashes, and the placement.
func migName(index int, profile string, p gpu.Placement) string {
	r := strings.NewReplacer(".", "-", "+", "-")
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", index, r.Replace(strings.ToLower(profile)), p.Start, p.Size)
}

// counterSetName is the shared counter set of a GPU.
func counterSetName(index int) string { return fmt.Sprintf("gpu-%d-counters", index) }

// semver turns "9.0", "12.6" or "560.35.03" into the semantic version the
// API accepts: three numeric parts without leading zeros.
func semver(v string) (string, error) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	if len(parts) == 0 || len(parts) > 3 {
		return "", fmt.Errorf("version %q: want 1 to 3 dot-separated numbers", v)
	}
	out := make([]string, 3)
	for i := range out {
		out[i] = "0"
		if i < len(parts) {
			n, err := strconv.ParseUint(parts[i], 10, 32)
			if err != nil {
				return "", fmt.Errorf("version %q: part %q is not a number", v, parts[i])
			}
			out[i] = strconv.FormatUint(n, 10)
		}
	}
	return strings.Join(out, "."), nil
}

func str(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
}
func num(n int) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n))}
}
func ver(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
}
func qty(n int64) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n, resource.BinarySI)}
}

// PCIeRootFunc returns the PCIe root complex ("pci0000:00") of a GPU by
// its PCI bus ID.
type PCIeRootFunc func(pciBusID string) (string, error)

// topologyRoots derives root complexes from the GPUs' pairwise PCIe links
// when sysfs cannot say (the simulated node): GPUs whose closest common
// ancestor is at most a host bridge share a root, named after the bus of
// the first of them.
func topologyRoots(gpus []gpu.Device, topo *gpu.Topology) map[int]string {
	out := map[int]string{}
	for i := range gpus {
		if _, ok := out[gpus[i].Index]; ok {
			continue
		}
		root := rootOfBus(gpus[i].PCIBusID)
		out[gpus[i].Index] = root
		for j := i + 1; j < len(gpus); j++ {
			if topo == nil {
				continue
			}
			l, ok := topo.Between(gpus[i].Index, gpus[j].Index)
			if ok && l.PCIe <= gpu.PCIeHostBridge {
				if _, done := out[gpus[j].Index]; !done {
					out[gpus[j].Index] = root
				}
			}
		}
	}
	return out
}

// rootOfBus is "pci<domain>:<bus>" of a bus ID "0000:1b:00.0".
func rootOfBus(busID string) string {
	parts := strings.Split(strings.ToLower(busID), ":")
	if len(parts) < 2 {
		return "pci0000:00"
	}
	domain := parts[0]
	if len(parts) == 2 { // "1b:00.0" without a domain
		domain, parts = "0000", append([]string{"0000"}, parts...)
	}
	return "pci" + domain + ":" + parts[1]
}

// nvlinkDomains numbers the NVLink islands: GPUs connected by NVLink
// (directly or through others) share the lowest GPU index among them.
func nvlinkDomains(gpus []gpu.Device, topo *gpu.Topology) map[int]int {
	parent := map[int]int{}
	var find func(int) int
	find = func(i int) int {
		if p, ok := parent[i]; ok && p != i {
			r := find(p)
			parent[i] = r
			return r
		}
		return i
	}
	for _, g := range gpus {
		parent[g.Index] = g.Index
	}
	if topo != nil {
		for _, a := range gpus {
			for _, b := range gpus {
				if a.Index >= b.Index {
					continue
				}
				if l, ok := topo.Between(a.Index, b.Index); ok && l.NVLinks > 0 {
					ra, rb := find(a.Index), find(b.Index)
					parent[max(ra, rb)] = min(ra, rb)
				}
			}
		}
	}
	out := map[int]int{}
	for _, g := range gpus {
		out[g.Index] = find(g.Index)
	}
	return out
}

// buildInventory reads the backend and lays out the devices to publish.
// Instances at the placements in ours (by GPU index) were made for
// claims: they are not part of the GPU's static layout.
func buildInventory(ctx context.Context, b gpu.Backend, pcieRoot PCIeRootFunc, ours map[int][]gpu.Placement) (*inventory, error) {
	sys, err := b.System(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the driver version: %w", err)
	}
	gpus, err := b.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	topo, err := b.Topology(ctx)
	if err != nil {
		topo = nil
	}
	driverVer, err := semver(sys.DriverVersion)
	if err != nil {
		return nil, fmt.Errorf("driver version: %w", err)
	}
	cudaVer, err := semver(fmt.Sprintf("%d.%d", sys.CUDADriverVersion.Major(), sys.CUDADriverVersion.Minor()))
	if err != nil {
		return nil, fmt.Errorf("CUDA driver version: %w", err)
	}
	roots := topologyRoots(gpus, topo)
	domains := nvlinkDomains(gpus, topo)
	inv := &inventory{gpus: gpus, byName: map[string]*device{}, memSlices: map[int]int{}}
	for i := range gpus {
		g := &inv.gpus[i]
		cc, err := semver(g.ComputeCapability.String())
		if err != nil {
			return nil, fmt.Errorf("GPU %d compute capability: %w", g.Index, err)
		}
		root := roots[g.Index]
		if pcieRoot != nil {
			if r, err := pcieRoot(g.PCIBusID); err == nil {
				root = r
			}
		}
		common := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			apidra.AttrProductName:           str(g.Name),
			apidra.AttrBrand:                 str(g.Brand),
			apidra.AttrArchitecture:          str(archName(g.Architecture)),
			apidra.AttrCUDAComputeCapability: ver(cc),
			apidra.AttrDriverVersion:         ver(driverVer),
			apidra.AttrCUDADriverVersion:     ver(cudaVer),
			apidra.AttrPCIeBusID:             str(g.PCIBusID),
			apidra.AttrPCIeRoot:              str(root),
			apidra.AttrNVLinkDomain:          num(domains[g.Index]),
		}
		if !g.MIG.Current {
			attrs := clone(common)
			attrs[apidra.AttrType] = str(apidra.TypeGPU)
			attrs[apidra.AttrUUID] = str(g.UUID)
			attrs[apidra.AttrIndex] = num(g.Index)
			attrs[apidra.AttrMinor] = num(g.Minor)
			inv.add(&device{name: gpuName(g.Index), gpu: g, attrs: attrs, capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				apidra.CapacityMemory: qty(int64(g.MemoryMiB) << 20),
			}})
			continue
		}
		profiles, err := b.MIGProfiles(ctx, g.Index)
		if err != nil {
			return nil, fmt.Errorf("listing the MIG profiles of GPU %d: %w", g.Index, err)
		}
		if err := inv.addMIG(g, profiles, common, ours[g.Index]); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// archName is the architecture as NVIDIA's driver names it ("Hopper").
func archName(a gpu.Architecture) string {
	switch a {
	case gpu.ArchAda:
		return "Ada Lovelace"
	case gpu.ArchUnknown, "":
		return "Unknown"
	}
	s := string(a)
	return strings.ToUpper(s[:1]) + s[1:]
}

func clone(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(m)+8)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (inv *inventory) add(d *device) {
	inv.devices = append(inv.devices, d)
	inv.byName[d.name] = d
}

// addMIG adds every profile at every placement of a GPU in MIG mode, and
// the GPU's counter set.
func (inv *inventory) addMIG(g *gpu.Device, profiles []gpu.MIGProfile, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, ours []gpu.Placement) error {
	memSlices, computeSlices := 0, 0
	for _, p := range profiles {
		computeSlices = max(computeSlices, p.SliceCount)
		for _, pl := range p.Placements {
			memSlices = max(memSlices, pl.Start+pl.Size)
		}
	}
	if memSlices == 0 || memSlices > 16 {
		return fmt.Errorf("GPU %d: %d MIG memory slices; want 1 to 16", g.Index, memSlices)
	}
	inv.memSlices[g.Index] = memSlices
	counters := map[string]resourceapi.Counter{
		apidra.CounterComputeSlices: {Value: *resource.NewQuantity(int64(computeSlices), resource.DecimalSI)},
	}
	for i := range memSlices {
		counters[apidra.CounterMemorySlicePrefix+strconv.Itoa(i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	inv.counters = append(inv.counters, resourceapi.CounterSet{Name: counterSetName(g.Index), Counters: counters})
	// Smaller profiles first: the allocator takes the first device that
	// fits, so small claims pack at low placements.
	profiles = slices.Clone(profiles)
	slices.SortStableFunc(profiles, func(a, b gpu.MIGProfile) int {
		return cmp.Or(cmp.Compare(a.SliceCount, b.SliceCount), cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range profiles {
		for _, pl := range p.Placements {
			spot := &migSpot{profile: p, placement: pl}
			for k := range g.MIGDevices {
				m := &g.MIGDevices[k]
				if slices.Contains(ours, m.Placement) {
					continue
				}
				switch {
				case m.Placement == pl && m.GPUInstanceProfile == p.ID:
					spot.static = m
				case m.Placement.Overlaps(pl):
					spot.blockedBy = m
				}
			}
			attrs := clone(common)
			attrs[apidra.AttrType] = str(apidra.TypeMIG)
			attrs[apidra.AttrMIGProfile] = str(p.Name)
			attrs[apidra.AttrParentUUID] = str(g.UUID)
			attrs[apidra.AttrParentIndex] = num(g.Index)
			attrs[apidra.AttrMIGPlacementStart] = num(pl.Start)
			attrs[apidra.AttrMIGPlacementSize] = num(pl.Size)
			if spot.static != nil {
				attrs[apidra.AttrUUID] = str(spot.static.UUID)
			}
			d := &device{name: migName(g.Index, p.Name, pl), gpu: g, mig: spot, attrs: attrs, capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				apidra.CapacityMemory:          qty(int64(p.MemoryMiB) << 20),
				apidra.CapacityMultiprocessors: qty(int64(p.MultiprocessorCount)),
			}}
			inv.add(d)
		}
	}
	return nil
}

// consumes is what a MIG device takes from its GPU's counters.
func (d *device) consumes() []resourceapi.DeviceCounterConsumption {
	if d.mig == nil {
		return nil
	}
	c := map[string]resourceapi.Counter{
		apidra.CounterComputeSlices: {Value: *resource.NewQuantity(int64(d.mig.profile.SliceCount), resource.DecimalSI)},
	}
	for i := d.mig.placement.Start; i < d.mig.placement.Start+d.mig.placement.Size; i++ {
		c[apidra.CounterMemorySlicePrefix+strconv.Itoa(i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	return []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(d.gpu.Index), Counters: c}}
}
