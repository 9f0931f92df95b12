package sharing

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Sharing is how a device is shared between containers.
type Sharing string

// Sharing modes.
const (
	SharingNone        Sharing = "none"
	SharingTimeSlicing Sharing = "time-slicing"
	SharingMPS         Sharing = "mps"
)

// ReplicaSeparator joins a device's UUID and its replica number in a
// replica's device ID, as NVIDIA's plugin does.
const ReplicaSeparator = "::"

// ErrInvalidLayout says that the GPUs on the node contradict the config
// (such as MIG strategy single over different MIG devices).
var ErrInvalidLayout = errors.New("GPU layout does not fit the config")

// Device is one device the kubelet sees.
type Device struct {
	// ID is the kubelet device ID: the GPU or MIG UUID, or
	// <uuid>::<replica> for a shared device.
	ID string
	// UUID is the underlying GPU's or MIG device's UUID.
	UUID string
	// Index is "3" for GPU 3, "3:1" for MIG device 1 of GPU 3.
	Index string
	// GPUIndex and GPUUUID name the physical GPU.
	GPUIndex int
	GPUUUID  string
	// MIG is set for MIG devices.
	MIG *gpu.MIGDevice
	// Replica is this device's replica number, Replicas how many the
	// underlying device has (1 when not shared).
	Replica  int
	Replicas int
	Sharing  Sharing
	// MemoryMiB is the memory processes can use on the underlying device:
	// a GPU's framebuffer less what its driver reserves.
	MemoryMiB uint64
	// NUMANode is the GPU's NUMA node or -1.
	NUMANode int
	// Paths are the GPU's device nodes, such as /dev/nvidia3.
	Paths []string
}

// Shared reports whether the device is a replica.
func (d *Device) Shared() bool { return d.Sharing != SharingNone }

// MPSMemoryLimitMiB is the memory one MPS client may pin, 0 when not MPS.
func (d *Device) MPSMemoryLimitMiB() uint64 {
	if d.Sharing != SharingMPS || d.Replicas == 0 {
		return 0
	}
	return d.MemoryMiB / uint64(d.Replicas)
}

// MPSActiveThreadPercentage is the share of SMs an MPS client may use, 0
// when not MPS.
func (d *Device) MPSActiveThreadPercentage() int {
	if d.Sharing != SharingMPS || d.Replicas == 0 {
		return 0
	}
	return 100 / d.Replicas
}

// Resource is one extended resource and its devices.
type Resource struct {
	// Name is the full resource name, such as nvidia.com/gpu.
	Name string
	// Devices are ordered by GPU index, MIG device, replica.
	Devices []Device
	// FailRequestsGreaterThanOne refuses requests for more than one
	// shared device.
	FailRequestsGreaterThanOne bool
	// Policy is the allocation policy for shared and MIG devices.
	Policy string
	byID   map[string]int
}

// Device returns the device with the kubelet ID id.
func (r *Resource) Device(id string) (*Device, bool) {
	i, ok := r.byID[id]
	if !ok {
		return nil, false
	}
	return &r.Devices[i], true
}

// HasMIG reports whether the resource holds MIG devices.
func (r *Resource) HasMIG() bool { return len(r.Devices) > 0 && r.Devices[0].MIG != nil }

// HasReplicas reports whether any device is shared.
func (r *Resource) HasReplicas() bool {
	for i := range r.Devices {
		if r.Devices[i].Shared() {
			return true
		}
	}
	return false
}

// ShortName is the name without the nvidia.com/ domain.
func (r *Resource) ShortName() string {
	if _, s, ok := strings.Cut(r.Name, "/"); ok {
		return s
	}
	return r.Name
}

// unit is a whole GPU or MIG device before sharing.
type unit struct {
	name string // resource name before sharing
	dev  Device
}

// Build computes the node's resources, sorted by name.
func Build(cfg *configv1.Config, gpus []gpu.Device) ([]*Resource, error) {
	units, err := units(cfg, gpus)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Resource{}
	position := map[string]int{}
	for _, u := range units {
		pos := position[u.name]
		position[u.name]++
		name, devs, failGT1, err := share(cfg, u, pos)
		if err != nil {
			return nil, err
		}
		r := byName[name]
		if r == nil {
			r = &Resource{Name: name, Policy: cfg.Sharing.AllocationPolicy}
			byName[name] = r
		}
		r.FailRequestsGreaterThanOne = r.FailRequestsGreaterThanOne || failGT1
		r.Devices = append(r.Devices, devs...)
	}
	out := make([]*Resource, 0, len(byName))
	for _, r := range byName {
		r.byID = make(map[string]int, len(r.Devices))
		for i, d := range r.Devices {
			r.byID[d.ID] = i
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if err := checkNoMixedNames(out); err != nil {
		return nil, err
	}
	return out, nil
}

func checkNoMixedNames(rs []*Resource) error {
	for _, r := range rs {
		modes := map[Sharing]bool{}
		for i := range r.Devices {
			modes[r.Devices[i].Sharing] = true
		}
		if modes[SharingMPS] && modes[SharingTimeSlicing] {
			return fmt.Errorf("resource %s would hold both time-sliced and MPS devices; rename one of them (rename or renameByDefault): %w", r.Name, ErrInvalidLayout)
		}
	}
	return nil
}

func gpuDevice(g *gpu.Device) Device {
	return Device{
		ID: g.UUID, UUID: g.UUID, Index: strconv.Itoa(g.Index),
		GPUIndex: g.Index, GPUUUID: g.UUID, Replicas: 1, Sharing: SharingNone,
		MemoryMiB: usableMiB(g), NUMANode: g.NUMANode, Paths: []string{g.Path()},
	}
}

// usableMiB is g's framebuffer less what the driver reserves: the most
// its processes (or MPS clients, all together) can pin.
func usableMiB(g *gpu.Device) uint64 {
	if g.ReservedMiB >= g.MemoryMiB {
		return g.MemoryMiB
	}
	return g.MemoryMiB - g.ReservedMiB
}

func migDevice(g *gpu.Device, m *gpu.MIGDevice) Device {
	mig := *m
	return Device{
		ID: m.UUID, UUID: m.UUID, Index: fmt.Sprintf("%d:%d", g.Index, m.GPUInstanceID),
		GPUIndex: g.Index, GPUUUID: g.UUID, MIG: &mig, Replicas: 1, Sharing: SharingNone,
		MemoryMiB: m.MemoryMiB, NUMANode: g.NUMANode, Paths: []string{g.Path()},
	}
}

// gpuResourceName is the name of a whole GPU: nvidia.com/gpu, or a name
// from resources.gpus whose pattern matches the product name.
func gpuResourceName(cfg *configv1.Config, g *gpu.Device) string {
	for _, r := range cfg.Resources.GPUs {
		if ok, _ := path.Match(r.Pattern, g.Name); ok {
			return configv1.FullName(r.Name)
		}
	}
	return configv1.DefaultResourceName
}

func migResourceName(cfg *configv1.Config, m *gpu.MIGDevice) string {
	for _, r := range cfg.Resources.MIGs {
		if ok, _ := path.Match(r.Pattern, m.Profile); ok {
			return configv1.FullName(r.Name)
		}
	}
	return configv1.ResourcePrefix + "mig-" + m.Profile
}

func units(cfg *configv1.Config, gpus []gpu.Device) ([]unit, error) {
	var out []unit
	strategy := cfg.MIGStrategy()
	if strategy == configv1.MIGStrategySingle {
		if err := checkSingle(gpus); err != nil {
			return nil, err
		}
	}
	for i := range gpus {
		g := &gpus[i]
		if strategy == configv1.MIGStrategyNone || !g.MIG.Current {
			out = append(out, unit{name: gpuResourceName(cfg, g), dev: gpuDevice(g)})
			continue
		}
		for j := range g.MIGDevices {
			m := &g.MIGDevices[j]
			name := configv1.DefaultResourceName
			if strategy == configv1.MIGStrategyMixed {
				name = migResourceName(cfg, m)
			}
			out = append(out, unit{name: name, dev: migDevice(g, m)})
		}
	}
	return out, nil
}

// checkSingle enforces MIG strategy single: every GPU has MIG on with the
// same kind of MIG device, or none has MIG on.
func checkSingle(gpus []gpu.Device) error {
	var withMIG, without []string
	profiles := map[string][]string{}
	for _, g := range gpus {
		if !g.MIG.Current {
			without = append(without, strconv.Itoa(g.Index))
			continue
		}
		withMIG = append(withMIG, strconv.Itoa(g.Index))
		for _, m := range g.MIGDevices {
			profiles[m.Profile] = append(profiles[m.Profile], fmt.Sprintf("%d:%d", g.Index, m.GPUInstanceID))
		}
	}
	if len(withMIG) > 0 && len(without) > 0 {
		return fmt.Errorf("migStrategy single needs MIG on every GPU or on none, but GPUs %s have MIG and GPUs %s do not; use migStrategy mixed or change the MIG modes: %w",
			strings.Join(withMIG, ","), strings.Join(without, ","), ErrInvalidLayout)
	}
	if len(profiles) > 1 {
		parts := make([]string, 0, len(profiles))
		for p, devs := range profiles {
			parts = append(parts, fmt.Sprintf("%s on %s", p, strings.Join(devs, ",")))
		}
		sort.Strings(parts)
		return fmt.Errorf("migStrategy single needs identical MIG devices, found %s; use migStrategy mixed or repartition the GPUs to one profile: %w",
			strings.Join(parts, "; "), ErrInvalidLayout)
	}
	return nil
}

// share applies the sharing config to a unit at position pos among the
// units of its resource.
func share(cfg *configv1.Config, u unit, pos int) (string, []Device, bool, error) {
	modes := []struct {
		mode Sharing
		rr   *configv1.ReplicatedResources
	}{
		{SharingTimeSlicing, &cfg.Sharing.TimeSlicing},
		{SharingMPS, &cfg.Sharing.MPS},
	}
	for _, m := range modes {
		for _, r := range m.rr.Resources {
			if configv1.FullName(r.Name) != u.name || !r.Devices.Selects(pos, u.dev.Index, u.dev.UUID) {
				continue
			}
			if m.mode == SharingMPS && u.dev.MIG != nil {
				return "", nil, false, fmt.Errorf("device %s is a MIG device and cannot be shared with MPS: %w", u.dev.UUID, ErrInvalidLayout)
			}
			name := u.name
			switch {
			case r.Rename != "":
				name = configv1.FullName(r.Rename)
			case m.rr.RenameByDefault:
				name = u.name + ".shared"
			}
			devs := make([]Device, r.Replicas)
			for i := range devs {
				d := u.dev
				d.ID = u.dev.UUID + ReplicaSeparator + strconv.Itoa(i)
				d.Replica, d.Replicas, d.Sharing = i, r.Replicas, m.mode
				devs[i] = d
			}
			return name, devs, m.rr.FailRequestsGreaterThanOne, nil
		}
	}
	return u.name, []Device{u.dev}, false, nil
}

// UnitID returns the underlying device's UUID of a kubelet device ID.
func UnitID(id string) string {
	if i := strings.Index(id, ReplicaSeparator); i >= 0 {
		return id[:i]
	}
	return id
}

// Names lists the resource names.
func Names(rs []*Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return slices.Clip(out)
}
