package sim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Proc is a simulated compute process: it holds framebuffer memory and
// keeps part of its GPU (or MIG device) busy.
type Proc struct {
	PID    uint32
	MemMiB uint64
	// Util is the share of its GPU or MIG device's SMs the process keeps
	// busy, and MemUtil the share of memory bandwidth, both in percent.
	Util, MemUtil uint32
	// MIG names the MIG device the process runs in; it must be set on a GPU
	// in MIG mode and nil otherwise.
	MIG *MIGRef
}

// MIGRef names a MIG device by its GPU and compute instance IDs.
type MIGRef struct {
	GPUInstanceID, ComputeInstanceID int
}

// thermalTau is how fast the GPU temperature follows its power: it covers
// 63% of the way to its new level in this time.
const thermalTau = 30 * time.Second

// telemetryState is the load model of one GPU. Power is a function of the
// current load and so constant between changes of load; energy integrates it
// exactly over simulated time, and the temperature approaches the level the
// power sets with the time constant thermalTau. The readings therefore do
// not depend on how often the GPU is sampled.
type telemetryState struct {
	last     time.Time
	energyMJ float64
	tempC    float64
	powerW   float64

	util, memUtil uint32
	usedMiB       uint64
	// nvlinkKiB is the NVLink data sent and received so far; it grows at
	// nvlinkBps, set by the load like the power.
	nvlinkKiB float64
	nvlinkBps float64

	ecc               gpu.ECCCounts
	remap             gpu.RemappedRows
	replays           uint64
	lastXID, xidCount uint64
}

func (t *telemetryState) start(s *GPUSpec, now time.Time) {
	t.last, t.tempC, t.powerW = now, s.IdleTempC, s.IdleWatts
}

// advance moves the model to now.
func (t *telemetryState) advance(s *GPUSpec, now time.Time) {
	dt := now.Sub(t.last).Seconds()
	if dt <= 0 {
		return
	}
	t.energyMJ += t.powerW * dt * 1000
	t.nvlinkKiB += t.nvlinkBps * dt / 1024
	target := s.IdleTempC + (s.MaxTempC-s.IdleTempC)*(t.powerW-s.IdleWatts)/(s.TDPWatts-s.IdleWatts)
	t.tempC = target + (t.tempC-target)*math.Exp(-dt/thermalTau.Seconds())
	t.last = now
}

func (t *telemetryState) recordXID(xid uint64) {
	t.lastXID = xid
	t.xidCount++
}

// reload recomputes the GPU's load from its processes. A process in a MIG
// device loads the GPU in proportion to the device's compute slices.
func (g *simGPU) reload() {
	var util, mem float64
	var used uint64
	for _, p := range g.procs {
		w := 1.0
		if p.MIG != nil && g.mig.computeSlices > 0 {
			if gi := g.mig.instance(p.MIG.GPUInstanceID); gi != nil {
				if ci := gi.compute(p.MIG.ComputeInstanceID); ci != nil {
					w = float64(ci.prof.slices) / float64(g.mig.computeSlices)
				}
			}
		}
		util += w * float64(p.Util)
		mem += w * float64(p.MemUtil)
		used += p.MemMiB
	}
	t := &g.tel
	t.util, t.memUtil, t.usedMiB = uint32(min(100, math.Round(util))), uint32(min(100, math.Round(mem))), used
	s := g.spec
	load := (0.8*float64(t.util) + 0.2*float64(t.memUtil)) / 100
	t.powerW = s.IdleWatts + (s.TDPWatts-s.IdleWatts)*load
	// A busy GPU exchanges data with its peers: NVLink traffic, both
	// directions together, follows the SM load up to nvlinkShare of the
	// links' capacity.
	t.nvlinkBps = float64(g.nvlinks) * 2 * nvlinkLaneBps(s.Architecture) * nvlinkShare * float64(t.util) / 100
}

// Traffic model of the simulated interconnects, as shares of their peak
// bandwidth at full SM load.
const (
	nvlinkShare = 0.4
	pcieTxShare = 0.05
	pcieRxShare = 0.15
	// tensorShare is the part of its busy time a busy GPU spends in
	// tensor operations.
	tensorShare = 0.6
)

// nvlinkLaneBps is the bandwidth of one NVLink in one direction, in bytes
// per second: 25 GB/s for NVLink 2 to 4 (Volta to Hopper), 50 GB/s for
// NVLink 5 (Blackwell).
func nvlinkLaneBps(a gpu.Architecture) float64 {
	if a == gpu.ArchBlackwell {
		return 50e9
	}
	return 25e9
}

// pcieBps is the bandwidth of the GPU's x16 PCIe link in one direction, in
// bytes per second, by the PCIe generation of the architecture.
func pcieBps(a gpu.Architecture) float64 {
	switch a {
	case gpu.ArchHopper, gpu.ArchBlackwell:
		return 64e9 // Gen 5
	case gpu.ArchAmpere, gpu.ArchAda:
		return 32e9 // Gen 4
	}
	return 16e9 // Gen 3
}

// hasGPM says whether the GPU has the performance monitors NVML's GPM
// calls read (Hopper and later); older GPUs offer no profiling readings
// through NVML.
func hasGPM(a gpu.Architecture) bool { return a == gpu.ArchHopper || a == gpu.ArchBlackwell }

// nvlinkCount is the number of NVLinks GPU i has in links: the count to
// each peer when they are all the same (links through NVSwitch, or a
// single bridge), else their sum (point-to-point links, as on a p3dn).
func nvlinkCount(links [][]gpu.Link, i int) int {
	sum, same, first := 0, true, -1
	for j, l := range links[i] {
		if j == i {
			continue
		}
		sum += l.NVLinks
		if first < 0 {
			first = l.NVLinks
		} else if l.NVLinks != first {
			same = false
		}
	}
	if same && first > 0 {
		return first
	}
	return sum
}

// profiling fills p with the profiling readings of a GPU (or GPU instance)
// that keeps util percent of its SMs and memUtil percent of its memory
// bandwidth busy and holds share of the GPU's PCIe link.
func profiling(p *gpu.Profiling, a gpu.Architecture, util, memUtil, share float64) {
	busy := util / 100
	pcie := pcieBps(a) * share * busy
	*p = gpu.Profiling{
		GREngineActive: ratio(busy), TensorActive: ratio(tensorShare * busy), DRAMActive: ratio(memUtil / 100),
		PCIeTxBytesPerSec: math.Round(pcieTxShare * pcie), PCIeRxBytesPerSec: math.Round(pcieRxShare * pcie),
	}
}

// ratio rounds a ratio to four places, as a counter-based reading would
// be, without float noise.
func ratio(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// migProfiling fills the per GPU instance profiling readings of g.
func (g *simGPU) migProfiling(s *gpu.Sample) {
	for _, gi := range g.mig.gis {
		if s.MIGProfilingCount == len(s.MIGProfiling) {
			return
		}
		slices := gi.prof.SliceCount
		var util, mem float64
		for _, p := range g.procs {
			if p.MIG == nil || p.MIG.GPUInstanceID != gi.id || slices == 0 {
				continue
			}
			w := 1.0
			if ci := gi.compute(p.MIG.ComputeInstanceID); ci != nil {
				w = float64(ci.prof.slices) / float64(slices)
			}
			util += w * float64(p.Util)
			mem += w * float64(p.MemUtil)
		}
		m := &s.MIGProfiling[s.MIGProfilingCount]
		m.GPUInstanceID, m.Has = gi.id, gpu.ReadProfiling
		share := 1.0
		if g.mig.computeSlices > 0 {
			share = float64(slices) / float64(g.mig.computeSlices)
		}
		profiling(&m.Profiling, g.spec.Architecture, min(100, util), min(100, mem), share)
		s.MIGProfilingCount++
	}
}

// Sample implements gpu.Telemetry. It does not allocate.
func (b *Backend) Sample(_ context.Context, index int, s *gpu.Sample) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.gpuLocked(OpSample, index)
	if err != nil {
		return err
	}
	now := b.clock.Now()
	t, spec := &g.tel, g.spec
	t.advance(spec, now)
	*s = gpu.Sample{
		GPUUtil:           t.util,
		MemCopyUtil:       t.memUtil,
		FBUsedMiB:         t.usedMiB,
		FBFreeMiB:         spec.MemoryMiB - spec.ReservedMiB - t.usedMiB,
		FBReservedMiB:     spec.ReservedMiB,
		GPUTempC:          uint32(math.Round(t.tempC)),
		PowerMilliW:       uint32(math.Round(t.powerW * 1000)),
		EnergyMilliJ:      uint64(t.energyMJ),
		SMClockMHz:        spec.IdleSMClockMHz,
		MemClockMHz:       spec.MemClockMHz,
		PCIeReplayCounter: t.replays,
		ECC:               t.ecc,
		RemappedRows:      t.remap,
		LastXID:           t.lastXID,
		XIDCount:          t.xidCount,
		Timestamp:         now,
	}
	if t.util > 0 {
		s.SMClockMHz = spec.MaxSMClockMHz
	}
	if spec.HBM {
		// HBM runs a few degrees above the die, more under memory load.
		s.MemoryTempC = uint32(math.Round(t.tempC + 3 + 5*float64(t.memUtil)/100))
	} else {
		s.MissingFieldsCount = 1
	}
	// The video engines idle: no simulated workload encodes or decodes.
	s.Has = gpu.ReadEncoderUtil | gpu.ReadDecoderUtil
	if g.nvlinks > 0 {
		s.Has |= gpu.ReadNVLink
		s.NVLinkKiB = uint64(t.nvlinkKiB)
	} else {
		s.Unsupported |= gpu.ReadNVLink
	}
	if hasGPM(spec.Architecture) {
		s.Has |= gpu.ReadProfiling
		profiling(&s.Profiling, spec.Architecture, float64(t.util), float64(t.memUtil), 1)
		if g.mig.current {
			g.migProfiling(s)
		}
	} else {
		s.Unsupported |= gpu.ReadProfiling
	}
	// Simulated GPUs are bare metal: a vGPU license does not apply.
	s.MissingFieldsCount += s.Unsupported.Count()
	return nil
}

// Processes implements gpu.Telemetry.
func (b *Backend) Processes(_ context.Context, index int, buf []gpu.Process) ([]gpu.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.gpuLocked(OpProcesses, index)
	if err != nil {
		return buf, err
	}
	for _, p := range g.procs {
		gp := gpu.Process{PID: p.PID, UsedMemMiB: p.MemMiB, SMUtil: p.Util, MemUtil: p.MemUtil,
			GPUInstanceID: -1, ComputeInstanceID: -1}
		if p.MIG != nil {
			gp.GPUInstanceID, gp.ComputeInstanceID = p.MIG.GPUInstanceID, p.MIG.ComputeInstanceID
		}
		buf = append(buf, gp)
	}
	return buf, nil
}

// RunProcess starts a simulated process on the GPU at index. It fails with
// gpu.ErrInsufficientResources when the GPU or MIG device lacks the free
// memory, and with gpu.ErrNotFound when the named MIG device does not exist.
func (b *Backend) RunProcess(index int, p Proc) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	doing := fmt.Sprintf("running process %d", p.PID)
	g, err := b.control(index, doing)
	if err != nil {
		return err
	}
	switch {
	case p.PID == 0:
		return fmt.Errorf("%s on gpu %d: the PID must not be 0", doing, index)
	case p.Util > 100 || p.MemUtil > 100:
		return fmt.Errorf("%s on gpu %d: utilization is a percentage (0-100), got util %d, memUtil %d", doing, index, p.Util, p.MemUtil)
	}
	if other, ok := b.pids[p.PID]; ok {
		return fmt.Errorf("%s on gpu %d: the PID already runs on gpu %d", doing, index, other)
	}
	free := g.spec.MemoryMiB - g.spec.ReservedMiB - g.tel.usedMiB
	switch {
	case g.mig.current && p.MIG == nil:
		return fmt.Errorf("%s on gpu %d (%s): the GPU is in MIG mode, name a MIG device (Proc.MIG)", doing, index, g.uuid)
	case !g.mig.current && p.MIG != nil:
		return fmt.Errorf("%s on gpu %d (%s): MIG device given but MIG mode is off: %w", doing, index, g.uuid, gpu.ErrNotSupported)
	case p.MIG != nil:
		gi := g.mig.instance(p.MIG.GPUInstanceID)
		if gi == nil || gi.compute(p.MIG.ComputeInstanceID) == nil {
			return fmt.Errorf("%s on gpu %d (%s): MIG device %d/%d: %w", doing, index, g.uuid,
				p.MIG.GPUInstanceID, p.MIG.ComputeInstanceID, gpu.ErrNotFound)
		}
		used := uint64(0)
		for _, q := range g.procs {
			if q.MIG != nil && q.MIG.GPUInstanceID == gi.id {
				used += q.MemMiB
			}
		}
		free = gi.prof.MemoryMiB - used
		p.MIG = &MIGRef{GPUInstanceID: p.MIG.GPUInstanceID, ComputeInstanceID: p.MIG.ComputeInstanceID}
	}
	if p.MemMiB > free {
		return fmt.Errorf("%s on gpu %d (%s): out of memory: %d MiB asked, %d MiB free: %w",
			doing, index, g.uuid, p.MemMiB, free, gpu.ErrInsufficientResources)
	}
	g.tel.advance(g.spec, b.clock.Now())
	g.procs = append(g.procs, p)
	b.pids[p.PID] = index
	g.reload()
	return nil
}

// SetProcessLoad changes the utilization a running process drives.
func (b *Backend) SetProcessLoad(pid uint32, util, memUtil uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if util > 100 || memUtil > 100 {
		return fmt.Errorf("setting load of process %d: utilization is a percentage (0-100), got util %d, memUtil %d", pid, util, memUtil)
	}
	g, i, err := b.process(pid, "setting load of process")
	if err != nil {
		return err
	}
	g.tel.advance(g.spec, b.clock.Now())
	g.procs[i].Util, g.procs[i].MemUtil = util, memUtil
	g.reload()
	return nil
}

// StopProcess ends a simulated process and frees its memory.
func (b *Backend) StopProcess(pid uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, i, err := b.process(pid, "stopping process")
	if err != nil {
		return err
	}
	g.tel.advance(g.spec, b.clock.Now())
	g.procs = append(g.procs[:i], g.procs[i+1:]...)
	delete(b.pids, pid)
	g.reload()
	return nil
}

func (b *Backend) process(pid uint32, doing string) (*simGPU, int, error) {
	if b.closed {
		return nil, 0, gpu.ErrClosed
	}
	index, ok := b.pids[pid]
	if !ok {
		return nil, 0, fmt.Errorf("%s %d: %w", doing, pid, gpu.ErrNotFound)
	}
	g, err := b.control(index, fmt.Sprintf("%s %d", doing, pid))
	if err != nil {
		return nil, 0, err
	}
	for i, p := range g.procs {
		if p.PID == pid {
			return g, i, nil
		}
	}
	return nil, 0, fmt.Errorf("%s %d: %w", doing, pid, gpu.ErrNotFound)
}

func (b *Backend) dropProcesses(g *simGPU) {
	for _, p := range g.procs {
		delete(b.pids, p.PID)
	}
	g.procs = nil
	g.reload()
}

// InjectPCIeReplay adds n to the GPU's PCIe replay counter.
func (b *Backend) InjectPCIeReplay(index int, n uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.control(index, "injecting PCIe replays")
	if err != nil {
		return err
	}
	g.tel.replays += n
	return nil
}
