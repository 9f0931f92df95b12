package sim

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// migState is the MIG configuration of one GPU. go-nvml's mock only holds
// the tables; the instances, their placements and the limits are kept and
// enforced here.
type migState struct {
	capable, current, pending bool
	profiles                  []*migProfile // by profile ID
	// memSlices and computeSlices are the GPU's memory and compute slices
	// (8 and 7 on A100/H100/H200/B200, 4 and 4 on A30).
	memSlices, computeSlices int
	gis                      []*gpuInstance // by ID
}

type migProfile struct {
	gpu.MIGProfile
	cis []*ciProfile
}

type ciProfile struct {
	id, slices, count, sms int
	placements             []gpu.Placement
}

type gpuInstance struct {
	id        int
	prof      *migProfile
	placement gpu.Placement
	cis       []*computeInstance // by ID
}

type computeInstance struct {
	id        int
	prof      *ciProfile
	placement gpu.Placement
	name      string
	uuid      string
}

// newMIGState reads a MIG table. The table's placements count compute
// slices; NVML counts memory slices (a 3g.40gb instance on an H100 takes
// four of its eight memory slices, so two of them fill the GPU).
// Placements are converted here, which is what makes capacity right: with
// the table's sizes a 3g+3g+1g layout would fit and use 90 GB of an 80 GB
// GPU.
func newMIGState(t *migTable) migState {
	var s migState
	totalMiB := t.memoryMiB
	one, ok := t.profile(giProfileOneSlice)
	if !ok || one.memoryMiB == 0 {
		return s
	}
	s.memSlices = int(math.Round(float64(totalMiB) / float64(one.memoryMiB)))
	sliceMiB := float64(totalMiB) / float64(s.memSlices)
	for _, info := range t.profiles {
		p := &migProfile{MIGProfile: gpu.MIGProfile{
			Name:                gpu.MIGProfileName(info.id, info.slices, info.memoryMiB, totalMiB),
			ID:                  info.id,
			SliceCount:          info.slices,
			InstanceCount:       info.instances,
			MemoryMiB:           info.memoryMiB,
			MultiprocessorCount: info.sms,
			Engines: gpu.Engines{Copy: info.copyEngines, Decoder: info.decoders,
				Encoder: info.encoders, JPEG: info.jpegs, OFA: info.ofas},
		}}
		s.computeSlices = max(s.computeSlices, p.SliceCount)
		size := max(1, int(math.Round(float64(info.memoryMiB)/sliceMiB)))
		for _, pl := range info.placements {
			start := pl.start
			if start%size != 0 || start+size > s.memSlices || hasStart(p.Placements, start) {
				continue
			}
			p.Placements = append(p.Placements, gpu.Placement{Start: start, Size: size})
		}
		for _, ci := range info.cis {
			cp := &ciProfile{id: ci.id, slices: ci.slices, count: ci.instances, sms: ci.sms}
			for _, pl := range ci.placements {
				cp.placements = append(cp.placements, gpu.Placement{Start: pl.start, Size: pl.size})
			}
			if len(cp.placements) == 0 && cp.slices > 0 {
				// Some tables (the A100's) list no compute-instance
				// placements. NVML places a compute instance of c slices at
				// multiples of c inside its GPU instance.
				for start := 0; start+cp.slices <= p.SliceCount; start += cp.slices {
					cp.placements = append(cp.placements, gpu.Placement{Start: start, Size: cp.slices})
				}
			}
			p.cis = append(p.cis, cp)
		}
		s.profiles = append(s.profiles, p)
	}
	return s
}

func hasStart(ps []gpu.Placement, start int) bool {
	for _, p := range ps {
		if p.Start == start {
			return true
		}
	}
	return false
}

func (s *migState) profileNames() string {
	names := make([]string, len(s.profiles))
	for i, p := range s.profiles {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func (s *migState) profile(name string) *migProfile {
	for _, p := range s.profiles {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func (s *migState) instance(id int) *gpuInstance {
	for _, gi := range s.gis {
		if gi.id == id {
			return gi
		}
	}
	return nil
}

func (gi *gpuInstance) compute(id int) *computeInstance {
	for _, ci := range gi.cis {
		if ci.id == id {
			return ci
		}
	}
	return nil
}

func (gi *gpuInstance) info() gpu.GPUInstance {
	return gpu.GPUInstance{ID: gi.id, Profile: gi.prof.Name, ProfileID: gi.prof.ID, Placement: gi.placement}
}

// devices lists the MIG devices: every compute instance of every GPU
// instance.
func (s *migState) devices(index int, parent string) []gpu.MIGDevice {
	var out []gpu.MIGDevice
	for _, gi := range s.gis {
		for _, ci := range gi.cis {
			out = append(out, gpu.MIGDevice{
				UUID: ci.uuid, ParentIndex: index, ParentUUID: parent, Profile: ci.name,
				GPUInstanceID: gi.id, ComputeInstanceID: ci.id, GPUInstanceProfile: gi.prof.ID,
				Placement: gi.placement, MemoryMiB: gi.prof.MemoryMiB, MultiprocessorCount: ci.prof.sms,
				GPUSlices: gi.prof.SliceCount, ComputeSlices: ci.prof.slices, Engines: gi.prof.Engines,
			})
		}
	}
	return out
}

// MIGDeviceUUID is the UUID of a simulated MIG device. It follows from the
// parent GPU's UUID and where the instances sit, so recreating the same
// layout gives the same UUIDs.
func MIGDeviceUUID(parentUUID string, giProfileID int, giPlacement gpu.Placement, ciProfileID int, ciPlacement gpu.Placement) string {
	return "MIG-" + uuid.NewSHA1(uuidSpace, fmt.Appendf(nil, "%s/gi/%d@%d/ci/%d@%d",
		parentUUID, giProfileID, giPlacement.Start, ciProfileID, ciPlacement.Start)).String()
}

func (b *Backend) migGPU(op Op, index int) (*simGPU, error) {
	g, err := b.gpuLocked(op, index)
	if err != nil {
		return nil, err
	}
	if !g.mig.capable {
		return nil, fmt.Errorf("gpu %d (%s, %s): %s: MIG is %w", index, g.uuid, g.spec.Name, op.doing(), gpu.ErrNotSupported)
	}
	return g, nil
}

// migEnabledGPU is migGPU for operations that need MIG mode on.
func (b *Backend) migEnabledGPU(op Op, index int) (*simGPU, error) {
	g, err := b.migGPU(op, index)
	if err != nil {
		return nil, err
	}
	if !g.mig.current {
		return nil, fmt.Errorf("gpu %d (%s): %s: MIG mode is off (pending: %v); enable it with SetMIGMode: %w",
			index, g.uuid, op.doing(), g.mig.pending, gpu.ErrNotSupported)
	}
	return g, nil
}

// SetMIGMode implements gpu.MIGManager. The new mode is pending; it becomes
// current at once when the GPU runs no process (and Options.MIGModeNeedsReset
// is false), otherwise on Reset. Turning MIG off while GPU instances exist
// fails with gpu.ErrInUse.
func (b *Backend) SetMIGMode(_ context.Context, index int, enabled bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migGPU(OpSetMIGMode, index)
	if err != nil {
		return err
	}
	if !enabled && len(g.mig.gis) > 0 {
		return fmt.Errorf("gpu %d (%s): %s: %d GPU instances exist; destroy them first: %w",
			index, g.uuid, OpSetMIGMode.doing(), len(g.mig.gis), gpu.ErrInUse)
	}
	g.mig.pending = enabled
	if !b.opts.MIGModeNeedsReset && len(g.procs) == 0 {
		g.mig.current = enabled
	}
	b.saveState()
	return nil
}

// MIGProfiles implements gpu.MIGManager. It answers on any MIG-capable GPU,
// whatever its MIG mode. Placements count memory slices, as NVML's do.
func (b *Backend) MIGProfiles(_ context.Context, index int) ([]gpu.MIGProfile, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migGPU(OpMIGProfiles, index)
	if err != nil {
		return nil, err
	}
	out := make([]gpu.MIGProfile, len(g.mig.profiles))
	for i, p := range g.mig.profiles {
		out[i] = p.MIGProfile
		out[i].Placements = append([]gpu.Placement(nil), p.Placements...)
	}
	return out, nil
}

// CreateGPUInstance implements gpu.MIGManager. It fails with
// gpu.ErrInsufficientResources when the profile's instances are all in use,
// the placement overlaps an instance, or no placement is free.
func (b *Backend) CreateGPUInstance(_ context.Context, index int, profile string, placement *gpu.Placement) (gpu.GPUInstance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migEnabledGPU(OpCreateGPUInstance, index)
	if err != nil {
		return gpu.GPUInstance{}, err
	}
	s := &g.mig
	p := s.profile(profile)
	fail := func(sentinel error, format string, args ...any) (gpu.GPUInstance, error) {
		return gpu.GPUInstance{}, fmt.Errorf("gpu %d (%s, %s): creating MIG GPU instance %s: %w: %s",
			index, g.uuid, g.spec.Name, profile, sentinel, fmt.Sprintf(format, args...))
	}
	if p == nil {
		return fail(gpu.ErrNotFound, "no such profile (the GPU offers %s)", s.profileNames())
	}
	if err := b.createFaultLocked(OpCreateGPUInstance, index, p.Name); err != nil {
		return gpu.GPUInstance{}, err
	}
	count, slices := 0, 0
	for _, gi := range s.gis {
		slices += gi.prof.SliceCount
		if gi.prof.ID == p.ID {
			count++
		}
	}
	if count >= p.InstanceCount {
		return fail(gpu.ErrInsufficientResources, "all %d instances of the profile exist", p.InstanceCount)
	}
	if slices+p.SliceCount > s.computeSlices {
		return fail(gpu.ErrInsufficientResources, "%d of %d compute slices are in use, the profile needs %d",
			slices, s.computeSlices, p.SliceCount)
	}
	var at gpu.Placement
	if placement != nil {
		if !containsPlacement(p.Placements, *placement) {
			return fail(gpu.ErrNotFound, "placement %d:%d is not one of the profile's (%s)",
				placement.Start, placement.Size, placementList(p.Placements))
		}
		if gi := s.overlapping(*placement); gi != nil {
			return fail(gpu.ErrInsufficientResources, "placement %d:%d overlaps GPU instance %d (%s at %d:%d)",
				placement.Start, placement.Size, gi.id, gi.prof.Name, gi.placement.Start, gi.placement.Size)
		}
		at = *placement
	} else {
		found := false
		for _, pl := range p.Placements {
			if s.overlapping(pl) == nil {
				at, found = pl, true
				break
			}
		}
		if !found {
			return fail(gpu.ErrInsufficientResources, "no free placement among %s", placementList(p.Placements))
		}
	}
	gi := &gpuInstance{id: s.freeGIID(), prof: p, placement: at}
	s.gis = append(s.gis, gi)
	sort.Slice(s.gis, func(i, j int) bool { return s.gis[i].id < s.gis[j].id })
	b.saveState()
	return gi.info(), nil
}

func (s *migState) overlapping(p gpu.Placement) *gpuInstance {
	for _, gi := range s.gis {
		if gi.placement.Overlaps(p) {
			return gi
		}
	}
	return nil
}

// freeGIID returns the lowest unused GPU instance ID, starting at 1.
func (s *migState) freeGIID() int {
	for id := 1; ; id++ {
		if s.instance(id) == nil {
			return id
		}
	}
}

func containsPlacement(ps []gpu.Placement, p gpu.Placement) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func placementList(ps []gpu.Placement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p.Start, p.Size)
	}
	return strings.Join(parts, ", ")
}

// CreateComputeInstance implements gpu.MIGManager. Profile names are those
// of the MIG devices they make ("1c.3g.40gb", or "3g.40gb" for one spanning
// the GPU instance); empty means one spanning the GPU instance.
func (b *Backend) CreateComputeInstance(_ context.Context, index, gpuInstanceID int, profile string) (gpu.ComputeInstance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migEnabledGPU(OpCreateComputeInstance, index)
	if err != nil {
		return gpu.ComputeInstance{}, err
	}
	gi := g.mig.instance(gpuInstanceID)
	fail := func(sentinel error, format string, args ...any) (gpu.ComputeInstance, error) {
		return gpu.ComputeInstance{}, fmt.Errorf("gpu %d (%s): creating compute instance %q in GPU instance %d: %w: %s",
			index, g.uuid, profile, gpuInstanceID, sentinel, fmt.Sprintf(format, args...))
	}
	if gi == nil {
		return fail(gpu.ErrNotFound, "no such GPU instance")
	}
	if err := b.createFaultLocked(OpCreateComputeInstance, index, gi.prof.Name); err != nil {
		return gpu.ComputeInstance{}, err
	}
	var cp *ciProfile
	names := make([]string, 0, len(gi.prof.cis))
	for _, c := range gi.prof.cis {
		name := gpu.MIGDeviceName(gi.prof.Name, gi.prof.SliceCount, c.slices)
		names = append(names, name)
		if profile == name || profile == "" && c.slices == gi.prof.SliceCount {
			cp = c
		}
	}
	if cp == nil {
		return fail(gpu.ErrNotFound, "no such compute instance profile (GPU instance %s offers %s)",
			gi.prof.Name, strings.Join(names, ", "))
	}
	count, used := 0, 0
	for _, ci := range gi.cis {
		used += ci.prof.slices
		if ci.prof == cp {
			count++
		}
	}
	if count >= cp.count {
		return fail(gpu.ErrInsufficientResources, "all %d instances of the profile exist", cp.count)
	}
	var at gpu.Placement
	found := false
	for _, pl := range cp.placements {
		free := true
		for _, ci := range gi.cis {
			if ci.placement.Overlaps(pl) {
				free = false
				break
			}
		}
		if free {
			at, found = pl, true
			break
		}
	}
	if !found || used+cp.slices > gi.prof.SliceCount {
		return fail(gpu.ErrInsufficientResources, "%d of %d compute slices are in use, no placement among %s is free",
			used, gi.prof.SliceCount, placementList(cp.placements))
	}
	id := 0
	for gi.compute(id) != nil {
		id++
	}
	ci := &computeInstance{
		id: id, prof: cp, placement: at,
		name: gpu.MIGDeviceName(gi.prof.Name, gi.prof.SliceCount, cp.slices),
		uuid: MIGDeviceUUID(g.uuid, gi.prof.ID, gi.placement, cp.id, at),
	}
	gi.cis = append(gi.cis, ci)
	sort.Slice(gi.cis, func(i, j int) bool { return gi.cis[i].id < gi.cis[j].id })
	b.saveState()
	return gpu.ComputeInstance{ID: ci.id, GPUInstanceID: gi.id, Profile: ci.name, ProfileID: cp.id, UUID: ci.uuid}, nil
}

// DestroyComputeInstance implements gpu.MIGManager. It fails with
// gpu.ErrInUse while a simulated process runs in the compute instance.
func (b *Backend) DestroyComputeInstance(_ context.Context, index, gpuInstanceID, computeInstanceID int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migEnabledGPU(OpDestroyComputeInstance, index)
	if err != nil {
		return err
	}
	gi := g.mig.instance(gpuInstanceID)
	var ci *computeInstance
	if gi != nil {
		ci = gi.compute(computeInstanceID)
	}
	if ci == nil {
		return fmt.Errorf("gpu %d (%s): destroying compute instance %d/%d: %w", index, g.uuid, gpuInstanceID, computeInstanceID, gpu.ErrNotFound)
	}
	for _, p := range g.procs {
		if p.MIG != nil && p.MIG.GPUInstanceID == gi.id && p.MIG.ComputeInstanceID == ci.id {
			return fmt.Errorf("gpu %d (%s): destroying compute instance %d/%d: process %d runs in it: %w",
				index, g.uuid, gpuInstanceID, computeInstanceID, p.PID, gpu.ErrInUse)
		}
	}
	for i, c := range gi.cis {
		if c == ci {
			gi.cis = append(gi.cis[:i], gi.cis[i+1:]...)
			break
		}
	}
	b.saveState()
	return nil
}

// DestroyGPUInstance implements gpu.MIGManager. It fails with gpu.ErrInUse
// while the GPU instance has compute instances.
func (b *Backend) DestroyGPUInstance(_ context.Context, index, gpuInstanceID int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migEnabledGPU(OpDestroyGPUInstance, index)
	if err != nil {
		return err
	}
	gi := g.mig.instance(gpuInstanceID)
	if gi == nil {
		return fmt.Errorf("gpu %d (%s): destroying GPU instance %d: %w", index, g.uuid, gpuInstanceID, gpu.ErrNotFound)
	}
	if len(gi.cis) > 0 {
		return fmt.Errorf("gpu %d (%s): destroying GPU instance %d: it has %d compute instances: %w",
			index, g.uuid, gpuInstanceID, len(gi.cis), gpu.ErrInUse)
	}
	for i, x := range g.mig.gis {
		if x == gi {
			g.mig.gis = append(g.mig.gis[:i], g.mig.gis[i+1:]...)
			break
		}
	}
	b.saveState()
	return nil
}

// GPUInstances implements gpu.MIGManager.
func (b *Backend) GPUInstances(_ context.Context, index int) ([]gpu.GPUInstance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.migGPU(OpGPUInstances, index)
	if err != nil {
		return nil, err
	}
	out := make([]gpu.GPUInstance, 0, len(g.mig.gis))
	for _, gi := range g.mig.gis {
		out = append(out, gi.info())
	}
	return out, nil
}
