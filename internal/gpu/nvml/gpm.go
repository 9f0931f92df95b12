package nvml

import (
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// GPM (GPU performance monitoring, Hopper and later) gives a metric as
// the difference between two samples of the GPU's counters. Each GPU, and
// each of its MIG GPU instances, keeps its last sample so that every
// Sample call yields the metrics since the previous one; the first call
// yields none.

// gpmMinInterval is the shortest time between two GPM samples NVML
// accepts: its counters refresh every 100 ms.
const gpmMinInterval = 100 * time.Millisecond

// gpmMetrics are the GPM metrics read, in the order gpmProfiling expects.
var gpmMetrics = [...]gonvml.GpmMetricId{
	gonvml.GPM_METRIC_GRAPHICS_UTIL,   // percent
	gonvml.GPM_METRIC_ANY_TENSOR_UTIL, // percent
	gonvml.GPM_METRIC_DRAM_BW_UTIL,    // percent
	gonvml.GPM_METRIC_PCIE_TX_PER_SEC, // MiB/s
	gonvml.GPM_METRIC_PCIE_RX_PER_SEC, // MiB/s
}

type gpmSupport int8

const (
	gpmUnknown gpmSupport = iota
	gpmYes
	gpmNo
)

// gpmPair is the two sample buffers of one GPU or GPU instance and the
// metrics they last gave.
type gpmPair struct {
	prev, cur gonvml.GpmSample
	havePrev  bool
	at        time.Time
	last      gpu.Profiling
	lastHas   gpu.Readings
}

// gpmState is the GPM state of one GPU. mu serializes its samples.
type gpmState struct {
	mu      sync.Mutex
	support gpmSupport
	dev     gpmPair
	mig     map[int]*gpmPair // by GPU instance ID
	// get is the request buffer, kept because it is large (333 metrics).
	get gonvml.GpmMetricsGetType
}

// profiling fills the profiling readings of s from GPM. A GPU without GPM
// marks them unsupported; a failed call leaves them out of this sample.
func (b *Backend) profiling(index int, h gonvml.Device, s *gpu.Sample) {
	st := b.gpm[index]
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.support == gpmUnknown {
		sup, ret := h.GpmQueryDeviceSupport()
		switch {
		case ret == gonvml.SUCCESS && sup.IsSupportedDevice != 0:
			st.support = gpmYes
		case ret == gonvml.SUCCESS, ret == gonvml.ERROR_NOT_SUPPORTED, ret == gonvml.ERROR_FUNCTION_NOT_FOUND:
			st.support = gpmNo
		default: // ask again next time
			return
		}
	}
	if st.support == gpmNo {
		s.Unsupported |= gpu.ReadProfiling
		s.MissingFieldsCount += gpu.ReadProfiling.Count()
		return
	}
	now := time.Now()
	s.Has |= b.gpmRead(st, &st.dev, now, &s.Profiling, func(smp gonvml.GpmSample) gonvml.Return { return h.GpmSampleGet(smp) })
	if cur, _, ret := h.GetMigMode(); ret != gonvml.SUCCESS || cur != gonvml.DEVICE_MIG_ENABLE {
		return
	}
	count, ret := h.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return
	}
	for i := range count {
		m, ret := h.GetMigDeviceHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		gi, ret := m.GetGpuInstanceId()
		if ret != gonvml.SUCCESS || seenGI(s, gi) || s.MIGProfilingCount == len(s.MIGProfiling) {
			continue
		}
		p := st.mig[gi]
		if p == nil {
			p = &gpmPair{}
			st.mig[gi] = p
		}
		mp := &s.MIGProfiling[s.MIGProfilingCount]
		mp.GPUInstanceID = gi
		mp.Has = b.gpmRead(st, p, now, &mp.Profiling, func(smp gonvml.GpmSample) gonvml.Return { return h.GpmMigSampleGet(gi, smp) })
		s.MIGProfilingCount++
	}
}

func seenGI(s *gpu.Sample, gi int) bool {
	for i := range s.MIGProfilingCount {
		if s.MIGProfiling[i].GPUInstanceID == gi {
			return true
		}
	}
	return false
}

// gpmRead takes a new sample into p and fills out with the metrics since
// the previous one, returning which it holds. Called again within
// gpmMinInterval it repeats the last metrics.
func (b *Backend) gpmRead(st *gpmState, p *gpmPair, now time.Time, out *gpu.Profiling, take func(gonvml.GpmSample) gonvml.Return) gpu.Readings {
	if p.havePrev && now.Sub(p.at) < gpmMinInterval {
		*out = p.last
		return p.lastHas
	}
	for _, smp := range []*gonvml.GpmSample{&p.prev, &p.cur} {
		if *smp == nil {
			var ret gonvml.Return
			if *smp, ret = b.lib.GpmSampleAlloc(); ret != gonvml.SUCCESS {
				*smp = nil
				return 0
			}
		}
	}
	if ret := take(p.cur); ret != gonvml.SUCCESS {
		p.havePrev = false
		return 0
	}
	var has gpu.Readings
	*out = gpu.Profiling{}
	if p.havePrev {
		has = b.gpmMetricsGet(st, p.prev, p.cur, out)
	}
	p.prev, p.cur = p.cur, p.prev
	p.havePrev, p.at, p.last, p.lastHas = true, now, *out, has
	return has
}

// gpmMetricsGet computes the metrics between two samples. A metric the GPU
// does not offer is left out.
func (b *Backend) gpmMetricsGet(st *gpmState, s1, s2 gonvml.GpmSample, out *gpu.Profiling) gpu.Readings {
	g := &st.get
	g.NumMetrics, g.Sample1, g.Sample2 = uint32(len(gpmMetrics)), s1, s2
	for i, id := range gpmMetrics {
		g.Metrics[i] = gonvml.GpmMetric{MetricId: uint32(id)}
	}
	if ret := b.lib.GpmMetricsGet(g); ret != gonvml.SUCCESS {
		return 0
	}
	var has gpu.Readings
	const mib = 1 << 20
	for i := range gpmMetrics {
		m := &g.Metrics[i]
		if m.NvmlReturn != uint32(gonvml.SUCCESS) {
			continue
		}
		switch i {
		case 0:
			out.GREngineActive, has = m.Value/100, has|gpu.ReadGREngineActive
		case 1:
			out.TensorActive, has = m.Value/100, has|gpu.ReadTensorActive
		case 2:
			out.DRAMActive, has = m.Value/100, has|gpu.ReadDRAMActive
		case 3:
			out.PCIeTxBytesPerSec, has = m.Value*mib, has|gpu.ReadPCIeTx
		case 4:
			out.PCIeRxBytesPerSec, has = m.Value*mib, has|gpu.ReadPCIeRx
		}
	}
	return has
}

// free releases the GPM sample buffers.
func (st *gpmState) free() {
	st.mu.Lock()
	defer st.mu.Unlock()
	release := func(p *gpmPair) {
		for _, smp := range []gonvml.GpmSample{p.prev, p.cur} {
			if smp != nil {
				_ = smp.Free()
			}
		}
		*p = gpmPair{}
	}
	release(&st.dev)
	for _, p := range st.mig {
		release(p)
	}
}
