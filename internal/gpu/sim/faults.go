package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Op names a backend call that FailCall can make fail.
type Op string

// The calls a fault can be injected into. OpSystem is about the whole node
// and takes index -1; the others are about one GPU.
const (
	OpSystem                 Op = "System"
	OpDevices                Op = "Devices"
	OpTopology               Op = "Topology"
	OpSample                 Op = "Sample"
	OpProcesses              Op = "Processes"
	OpSubscribe              Op = "Subscribe"
	OpSetMIGMode             Op = "SetMIGMode"
	OpMIGProfiles            Op = "MIGProfiles"
	OpCreateGPUInstance      Op = "CreateGPUInstance"
	OpCreateComputeInstance  Op = "CreateComputeInstance"
	OpDestroyComputeInstance Op = "DestroyComputeInstance"
	OpDestroyGPUInstance     Op = "DestroyGPUInstance"
	OpGPUInstances           Op = "GPUInstances"
	// OpResetGPU is gpu.Resetter's reset: a fault injected into it is a
	// reset the driver refuses.
	OpResetGPU Op = "ResetGPU"
	// OpSetTimeSlice is gpu.TimeSlicer's SetTimeSlice (and TimeSlice).
	OpSetTimeSlice Op = "SetTimeSlice"
	// OpGPUFabric is gpu.FabricReader's GPUFabric.
	OpGPUFabric Op = "GPUFabric"
)

var opDoing = map[Op]string{
	OpSystem:                 "reading driver versions",
	OpDevices:                "reading device",
	OpTopology:               "reading topology",
	OpSample:                 "sampling telemetry",
	OpProcesses:              "listing processes",
	OpSubscribe:              "registering for events",
	OpSetMIGMode:             "setting MIG mode",
	OpMIGProfiles:            "listing MIG profiles",
	OpCreateGPUInstance:      "creating MIG GPU instance",
	OpCreateComputeInstance:  "creating MIG compute instance",
	OpDestroyComputeInstance: "destroying MIG compute instance",
	OpDestroyGPUInstance:     "destroying MIG GPU instance",
	OpGPUInstances:           "listing MIG GPU instances",
	OpResetGPU:               "resetting GPU",
	OpSetTimeSlice:           "setting the time slice",
	OpGPUFabric:              "reading the GPU fabric info",
}

// Ops lists every Op.
func Ops() []Op {
	return []Op{OpSystem, OpDevices, OpTopology, OpSample, OpProcesses, OpSubscribe, OpSetMIGMode,
		OpMIGProfiles, OpCreateGPUInstance, OpCreateComputeInstance, OpDestroyComputeInstance,
		OpDestroyGPUInstance, OpGPUInstances, OpResetGPU, OpSetTimeSlice}
}

func (o Op) doing() string {
	if d, ok := opDoing[o]; ok {
		return d
	}
	return string(o)
}

// ErrInjected is the error FailCall injects when it is given none, standing
// for NVML's unknown error.
var ErrInjected = errors.New("simulated NVML failure")

type faultKey struct {
	op    Op
	index int
}

// FailCall makes every later call of op about the GPU at index fail with
// err (ErrInjected when nil), wrapped with the GPU and the call, until
// ClearFaults. OpSystem takes index -1. Only that GPU's answers change: a
// Topology fault leaves the GPU's links unknown, a Devices fault leaves the
// GPU out of Devices, a Subscribe fault lists it in Unmonitored.
func (b *Backend) FailCall(op Op, index int, err error) error {
	if _, ok := opDoing[op]; !ok {
		names := make([]string, 0, len(opDoing))
		for _, o := range Ops() {
			names = append(names, string(o))
		}
		return fmt.Errorf("injecting a failure: unknown call %q (want one of %s)", op, strings.Join(names, ", "))
	}
	if err == nil {
		err = ErrInjected
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	switch {
	case op == OpSystem && index != -1:
		return fmt.Errorf("injecting a failure into %s: index must be -1 (the call is about the node), got %d", op, index)
	case op != OpSystem && (index < 0 || index >= len(b.gpus)):
		return fmt.Errorf("injecting a failure into %s: gpu %d: %w (node has %d GPUs)", op, index, gpu.ErrNotFound, len(b.gpus))
	}
	b.faults[faultKey{op, index}] = err
	b.log.Info("simulated call will fail", "op", string(op), "gpu", index, "err", err)
	return nil
}

// createFault is a FailCreate fault.
type createFault struct {
	profile string
	left    int
	err     error
}

// FailCreate makes creating MIG instances on the GPU at index fail with
// err (ErrInjected when nil), as a driver that refuses a layout does: op
// is OpCreateGPUInstance or OpCreateComputeInstance; profile, when not
// empty, limits the fault to instances of that GPU instance profile
// ("3g.40gb"); times, when above zero, to the next that many such calls,
// after which creating works again. Unlike FailCall, every other call
// (and a roll-back to another layout) works. Until ClearFaults.
func (b *Backend) FailCreate(op Op, index int, profile string, times int, err error) error {
	if op != OpCreateGPUInstance && op != OpCreateComputeInstance {
		return fmt.Errorf("injecting a failure: call %q: want %s or %s", op, OpCreateGPUInstance, OpCreateComputeInstance)
	}
	if times < 0 {
		return fmt.Errorf("injecting a failure into %s: times: want 0 (every call) or more, got %d", op, times)
	}
	if err == nil {
		err = ErrInjected
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	if index < 0 || index >= len(b.gpus) {
		return fmt.Errorf("injecting a failure into %s: gpu %d: %w (node has %d GPUs)", op, index, gpu.ErrNotFound, len(b.gpus))
	}
	if profile != "" && b.gpus[index].mig.profile(profile) == nil {
		return fmt.Errorf("injecting a failure into %s: profile %q: %w (GPU %d offers %s)", op, profile, gpu.ErrNotFound, index, b.gpus[index].mig.profileNames())
	}
	b.createFaults[faultKey{op, index}] = &createFault{profile: profile, left: times, err: err}
	b.log.Info("simulated MIG creation will fail", "op", string(op), "gpu", index, "profile", profile, "times", times, "err", err)
	return nil
}

// createFaultLocked is the error a FailCreate fault gives a call creating
// an instance of the GPU instance profile, counting it down.
func (b *Backend) createFaultLocked(op Op, index int, profile string) error {
	key := faultKey{op, index}
	f := b.createFaults[key]
	if f == nil || (f.profile != "" && f.profile != profile) {
		return nil
	}
	if f.left > 0 {
		if f.left--; f.left == 0 {
			delete(b.createFaults, key)
		}
	}
	return fmt.Errorf("gpu %d (%s): %s %s: %w", index, b.gpus[index].uuid, op.doing(), profile, f.err)
}

// ClearFaults removes every fault injected by FailCall and FailCreate and ends event
// waits made to fail by FailEventWait. Lost GPUs stay lost until Recover.
func (b *Backend) ClearFaults() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.faults)
	clear(b.createFaults)
	for s := range b.subs {
		s.clearWaitFailures()
	}
	b.log.Info("simulated faults cleared")
}

// control returns the GPU a control method acts on. Controls are not
// NVML calls: FailCall faults do not apply to them, but a lost GPU does.
func (b *Backend) control(index int, doing string) (*simGPU, error) {
	if b.closed {
		return nil, gpu.ErrClosed
	}
	if index < 0 || index >= len(b.gpus) {
		return nil, fmt.Errorf("%s: gpu %d: %w (node has %d GPUs)", doing, index, gpu.ErrNotFound, len(b.gpus))
	}
	g := b.gpus[index]
	if g.lost {
		return nil, fmt.Errorf("%s: gpu %d (%s): %w", doing, index, g.uuid, gpu.ErrGPULost)
	}
	return g, nil
}

// LoseGPU makes the GPU fall off the bus: every call about it fails with an
// error wrapping gpu.ErrGPULost, its processes are gone, and subscribers
// get XID 79 (GPU has fallen off the bus) from it. Other GPUs are not
// affected.
func (b *Backend) LoseGPU(index int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.control(index, "losing GPU")
	if err != nil {
		return err
	}
	now := b.clock.Now()
	g.tel.advance(g.spec, now)
	b.dropProcesses(g)
	g.tel.recordXID(XIDFallenOffBus)
	b.emit(gpu.Event{Kind: gpu.EventXID, UUID: g.uuid, Index: index, XID: XIDFallenOffBus,
		GPUInstanceID: -1, ComputeInstanceID: -1, Time: now})
	g.lost = true
	b.log.Info("simulated GPU lost", "gpu", index, "uuid", g.uuid)
	return nil
}

// XIDFallenOffBus is the XID a GPU reports when it falls off the bus.
const XIDFallenOffBus = 79

// Recover brings a GPU back as a node reboot would: it answers again, with
// its UUID, no processes, no MIG instances, the pending MIG mode applied
// and volatile ECC counters cleared. Recovering a GPU that is not lost
// resets it.
func (b *Backend) Recover(index int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	if index < 0 || index >= len(b.gpus) {
		return fmt.Errorf("recovering GPU: gpu %d: %w (node has %d GPUs)", index, gpu.ErrNotFound, len(b.gpus))
	}
	g := b.gpus[index]
	g.lost = false
	b.dropProcesses(g)
	b.resetLocked(g)
	b.log.Info("simulated GPU recovered", "gpu", index, "uuid", g.uuid)
	return nil
}

// Reset resets a GPU as nvidia-smi --gpu-reset does: the pending MIG mode
// becomes current, MIG instances are destroyed, volatile ECC counters and
// pending row remappings are cleared. It fails with gpu.ErrInUse while a
// simulated process runs on the GPU, and with gpu.ErrGPULost on a lost GPU.
func (b *Backend) Reset(index int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.control(index, "resetting GPU")
	if err != nil {
		return err
	}
	if len(g.procs) > 0 {
		return fmt.Errorf("resetting GPU: gpu %d (%s): %d processes run on it (first: pid %d): %w",
			index, g.uuid, len(g.procs), g.procs[0].PID, gpu.ErrInUse)
	}
	b.resetLocked(g)
	return nil
}

func (b *Backend) resetLocked(g *simGPU) {
	g.tel.advance(g.spec, b.clock.Now())
	g.mig.gis = nil
	g.mig.current = g.mig.pending
	g.timeSlice = gpu.TimeSliceDefault
	b.saveState()
	g.tel.ecc.VolatileSingleBit, g.tel.ecc.VolatileDoubleBit = 0, 0
	g.tel.remap.Pending = false
	g.reload()
}

var _ gpu.Resetter = (*Backend)(nil)

// ResetGPU implements gpu.Resetter as the driver's reset behaves: like
// Reset, and a GPU that fell off the bus (LoseGPU) answers again
// afterwards, as a secondary bus reset brings it back. A fault injected
// with FailCall(OpResetGPU, index, err) makes it fail with err, leaving
// the GPU as it was (lost or not): a reset that does not mend the GPU.
func (b *Backend) ResetGPU(_ context.Context, index int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	if index < 0 || index >= len(b.gpus) {
		return fmt.Errorf("resetting GPU: gpu %d: %w (node has %d GPUs)", index, gpu.ErrNotFound, len(b.gpus))
	}
	g := b.gpus[index]
	if err := b.faults[faultKey{OpResetGPU, index}]; err != nil {
		return fmt.Errorf("gpu %d (%s): %s: %w", index, g.uuid, OpResetGPU.doing(), err)
	}
	if !g.lost && len(g.procs) > 0 {
		return fmt.Errorf("resetting GPU: gpu %d (%s): %d processes run on it (first: pid %d): %w",
			index, g.uuid, len(g.procs), g.procs[0].PID, gpu.ErrInUse)
	}
	if g.lost {
		g.lost = false
		b.dropProcesses(g)
	}
	b.resetLocked(g)
	b.log.Info("simulated GPU reset", "gpu", index, "uuid", g.uuid)
	return nil
}
