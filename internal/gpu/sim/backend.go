package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Clock tells the simulated time. Telemetry integrates power over it and
// events carry it, so a test that passes a ManualClock gets the same
// readings on every run.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options configure New.
type Options struct {
	// NodeName is the Kubernetes node the simulated GPUs belong to. GPU and
	// MIG device UUIDs are derived from it, so the same name always gives
	// the same UUIDs. Empty means DefaultNodeName.
	NodeName string
	// Clock is the simulated time; nil means the wall clock.
	Clock Clock
	// MIGModeNeedsReset keeps every MIG mode change pending until Reset,
	// even on an idle GPU.
	MIGModeNeedsReset bool
	// Logger receives a line for every injected fault; nil discards them.
	Logger *slog.Logger
	// StateFile, when set, keeps the MIG mode and instances of the GPUs
	// across restarts, as real GPUs keep them across restarts of the
	// agent: read at start (the GPUs it lists start in its layout instead
	// of the profile's) and written after every MIG change.
	StateFile string
	// Fabric, when set, replaces the profile's fabric: the NVLink domain
	// of the rack the node sits in (the agent's --simulate-fabric). Only a
	// profile whose GPUs have a fabric takes one.
	Fabric *FabricSpec
}

// DefaultNodeName is the node name used when Options.NodeName is empty.
const DefaultNodeName = "gpuplane-sim"

// Backend is a simulated node implementing gpu.Backend, with controls
// (RunProcess, InjectXID, LoseGPU, FailCall, ...) that drive it. It is safe
// for concurrent use.
type Backend struct {
	prof  *Profile
	node  string
	clock Clock
	opts  Options
	log   *slog.Logger

	mu     sync.Mutex
	closed bool
	gpus   []*simGPU
	faults map[faultKey]error
	// createFaults are FailCreate's faults, by call and GPU.
	createFaults map[faultKey]*createFault
	subs         map[*subscription]struct{}
	// pids maps a running process to its GPU.
	pids map[uint32]int
}

var _ gpu.Backend = (*Backend)(nil)

// simGPU is the state of one simulated GPU. Every field is guarded by
// Backend.mu.
type simGPU struct {
	index int
	spec  *GPUSpec
	uuid  string
	lost  bool
	mig   migState
	procs []Proc
	tel   telemetryState
	// nvlinks is the number of NVLinks the GPU has, 0 without NVLink.
	nvlinks int
	// timeSlice is the GPU's time slice (gpu.TimeSlicer).
	timeSlice gpu.TimeSlice
}

// uuidSpace is the namespace of the name-based UUIDs of simulated devices.
var uuidSpace = uuid.NewSHA1(uuid.NameSpaceDNS, []byte("sim.gpuplane.io"))

// GPUUUID is the UUID a simulated GPU gets on a node: the same node name
// and index always give the same UUID.
func GPUUUID(node string, index int) string {
	return "GPU-" + uuid.NewSHA1(uuidSpace, fmt.Appendf(nil, "%s/gpu/%d", node, index)).String()
}

// New starts a simulated node from a profile. The profile is copied; later
// changes to it do not reach the backend.
func New(p *Profile, opts Options) (*Backend, error) {
	if p == nil {
		return nil, fmt.Errorf("starting simulated node: no profile")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("starting simulated node: %w", err)
	}
	if opts.Fabric != nil {
		var err error
		if p, err = withFabric(p, *opts.Fabric); err != nil {
			return nil, fmt.Errorf("starting simulated node: %w", err)
		}
	}
	b := &Backend{
		prof:  p.clone(),
		node:  opts.NodeName,
		clock: opts.Clock,
		// The state file is written from the end of New on: creating the
		// profile's MIG devices must not overwrite it before it is read.
		opts:         withoutStateFile(opts),
		log:          opts.Logger,
		faults:       map[faultKey]error{},
		createFaults: map[faultKey]*createFault{},
		subs:         map[*subscription]struct{}{},
		pids:         map[uint32]int{},
	}
	if b.node == "" {
		b.node = DefaultNodeName
	}
	if b.clock == nil {
		b.clock = realClock{}
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	now := b.clock.Now()
	for i := range b.prof.GPUs {
		spec := &b.prof.GPUs[i]
		g := &simGPU{index: i, spec: spec, uuid: GPUUUID(b.node, i), nvlinks: nvlinkCount(b.prof.Links, i)}
		if spec.MIGTable != "" {
			g.mig = newMIGState(migTables[spec.MIGTable])
			g.mig.capable = true
			g.mig.current, g.mig.pending = spec.MIGEnabled, spec.MIGEnabled
		}
		g.tel.start(spec, now)
		b.gpus = append(b.gpus, g)
	}
	for i := range b.prof.GPUs {
		for _, name := range b.prof.GPUs[i].MIGDevices {
			gi, err := b.CreateGPUInstance(context.Background(), i, name, nil)
			if err != nil {
				return nil, fmt.Errorf("starting simulated node: gpu %d: MIG device %s: %w", i, name, err)
			}
			if _, err := b.CreateComputeInstance(context.Background(), i, gi.ID, ""); err != nil {
				return nil, fmt.Errorf("starting simulated node: gpu %d: MIG device %s: %w", i, name, err)
			}
		}
	}
	if opts.StateFile != "" {
		if err := b.restoreState(opts.StateFile); err != nil {
			return nil, fmt.Errorf("starting simulated node: %w", err)
		}
		b.opts.StateFile = opts.StateFile
		b.mu.Lock()
		b.saveState()
		b.mu.Unlock()
	}
	return b, nil
}

func withoutStateFile(o Options) Options {
	o.StateFile = ""
	return o
}

// Profile returns a copy of the profile the node runs.
func (b *Backend) Profile() *Profile { return b.prof.clone() }

// NodeName is the node name the UUIDs derive from.
func (b *Backend) NodeName() string { return b.node }

// Name implements gpu.Backend: "sim:" and the profile's name.
func (b *Backend) Name() string { return "sim:" + b.prof.Name }

// Close implements gpu.Backend. It ends every subscription; later calls
// fail with gpu.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := make([]*subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		_ = s.Close()
	}
	return nil
}

// gpuLocked returns the GPU at index for op, or the error the call must
// return: the backend is closed, there is no such GPU, the GPU is lost, or
// a fault was injected. It must be called with b.mu held and does not
// allocate when the call succeeds.
func (b *Backend) gpuLocked(op Op, index int) (*simGPU, error) {
	if b.closed {
		return nil, gpu.ErrClosed
	}
	if index < 0 || index >= len(b.gpus) {
		return nil, fmt.Errorf("gpu %d: %w (node has %d GPUs)", index, gpu.ErrNotFound, len(b.gpus))
	}
	g := b.gpus[index]
	if g.lost {
		return nil, fmt.Errorf("gpu %d (%s): %s: %w", index, g.uuid, op.doing(), gpu.ErrGPULost)
	}
	if len(b.faults) > 0 {
		if err := b.faults[faultKey{op, index}]; err != nil {
			return nil, fmt.Errorf("gpu %d (%s): %s: %w", index, g.uuid, op.doing(), err)
		}
	}
	return g, nil
}

// System implements gpu.Inventory.
func (b *Backend) System(context.Context) (gpu.SystemInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.SystemInfo{}, gpu.ErrClosed
	}
	if err := b.faults[faultKey{OpSystem, -1}]; err != nil {
		return gpu.SystemInfo{}, fmt.Errorf("%s: %w", OpSystem.doing(), err)
	}
	return gpu.SystemInfo{
		DriverVersion:     b.prof.DriverVersion,
		CUDADriverVersion: b.prof.CUDADriverVersion,
		NVMLVersion:       b.prof.NVMLVersion,
		Hostname:          b.node,
	}, nil
}

// Devices implements gpu.Inventory. A GPU that cannot be read (lost, or a
// fault injected on OpDevices) is left out and named in the returned error,
// which wraps the GPU's error; the other GPUs are returned as usual, so a
// caller may go on with them.
func (b *Backend) Devices(context.Context) ([]gpu.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, gpu.ErrClosed
	}
	out := make([]gpu.Device, 0, len(b.gpus))
	var errs []error
	for i, g := range b.gpus {
		if _, err := b.gpuLocked(OpDevices, i); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, g.device())
	}
	return out, joinErrors("reading GPU inventory", errs)
}

func (g *simGPU) device() gpu.Device {
	s := g.spec
	d := gpu.Device{
		Index: g.index, Minor: g.index, UUID: g.uuid, Name: s.Name, Brand: s.Brand,
		Architecture: s.Architecture, ComputeCapability: s.ComputeCapability,
		MemoryMiB: s.MemoryMiB, ReservedMiB: s.ReservedMiB, PCIBusID: s.PCIBusID, PCIDeviceID: s.PCIDeviceID, NUMANode: s.NUMANode,
		MIG: gpu.MIGMode{Capable: g.mig.capable, Current: g.mig.current, Pending: g.mig.pending},
	}
	if g.mig.current {
		d.MIGDevices = g.mig.devices(g.index, g.uuid)
	}
	return d
}

// Topology implements gpu.Inventory. A lost GPU, or one with a fault
// injected on OpTopology, has unknown links; that is not an error.
func (b *Backend) Topology(context.Context) (*gpu.Topology, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, gpu.ErrClosed
	}
	n := len(b.gpus)
	readable := make([]bool, n)
	for i := range n {
		_, err := b.gpuLocked(OpTopology, i)
		readable[i] = err == nil
	}
	t := gpu.NewTopology(n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			if readable[i] && readable[j] {
				t.Set(i, j, b.prof.Links[i][j])
			}
		}
	}
	return t, nil
}

func joinErrors(doing string, errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %w", doing, errs[0])
	}
	args := make([]any, len(errs))
	format := doing + ":"
	for i, e := range errs {
		args[i] = e
		format += " %w;"
	}
	return fmt.Errorf(format[:len(format)-1], args...)
}
