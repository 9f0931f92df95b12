package metrics

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// deviceCollector emits the dcgm-exporter GPU series: one sample per GPU,
// and the framebuffer of each MIG device from its processes. A GPU that
// does not answer loses its series for this scrape; the scrape goes on.
type deviceCollector struct{ e *Exporter }

var _ collector = (*deviceCollector)(nil)

func (*deviceCollector) Name() string { return "devices" }

func (c *deviceCollector) collect(ctx context.Context, emit func(prometheus.Metric)) error {
	e := c.e
	for i := range e.devices {
		d := &e.devices[i]
		s := &e.samples[i]
		err := e.opts.GPUs.Sample(ctx, d.Index, s)
		if err == nil {
			err = e.procErr[i]
		}
		if err != nil {
			// Re-read the inventory next scrape: the GPU may be gone.
			e.invStale = true
			reason := reasonReadError
			if errors.Is(err, gpu.ErrGPULost) {
				reason = reasonGPULost
			}
			e.log.Debug("GPU did not answer; leaving its series out", "gpu", d.Index, "uuid", d.UUID, "err", err)
			emit(prometheus.MustNewConstMetric(e.descs.telemetryUp, prometheus.GaugeValue, 0, e.labelValues(i, reason)...))
			continue
		}
		emit(prometheus.MustNewConstMetric(e.descs.telemetryUp, prometheus.GaugeValue, 1, e.labelValues(i, "")...))
		var ctr, ns, pod string
		if h := e.att.exclusive(d.UUID); h != nil && !d.MIG.Current {
			ctr, ns, pod = h.Container, h.Namespace, h.Pod
		}
		c.noteUnsupported(i, s.Unsupported)
		own, dcgm := e.devicePairs(i, ctr, ns, pod), e.dcgmPairs(i, ctr, ns, pod)
		for f := range e.descs.fields {
			fd := &e.descs.fields[f]
			if fd.need != 0 && s.Has&fd.need == 0 {
				continue
			}
			v := fd.value(s)
			if fd.skipZero && v == 0 {
				continue
			}
			pairs := dcgm
			if fd.own {
				pairs = own
			}
			emit(e.metric(fd.desc, pairs, fd.typ, v))
		}
		if d.MIG.Current {
			c.emitMIG(i, s, emit)
		}
	}
	return nil
}

// emitMIG emits the framebuffer used and free of each MIG device, summed
// from the processes in its GPU instance.
func (c *deviceCollector) emitMIG(i int, s *gpu.Sample, emit func(prometheus.Metric)) {
	e := c.e
	d := &e.devices[i]
	for j := range d.MIGDevices {
		m := &d.MIGDevices[j]
		var used uint64
		for _, p := range e.procs[i] {
			if p.GPUInstanceID == m.GPUInstanceID {
				used += p.UsedMemMiB
			}
		}
		var ctr, ns, pod string
		if h := e.att.exclusive(m.UUID); h != nil {
			ctr, ns, pod = h.Container, h.Namespace, h.Pod
		}
		pairs := e.dcgmMIGPairs(i, m.Profile, itoa(m.GPUInstanceID), ctr, ns, pod)
		free := uint64(0)
		if m.MemoryMiB > used {
			free = m.MemoryMiB - used
		}
		emit(e.metric(e.descs.migFBUsed, pairs, prometheus.GaugeValue, float64(used)))
		emit(e.metric(e.descs.migFBFree, pairs, prometheus.GaugeValue, float64(free)))
		// Profiling is per GPU instance: every compute instance of one
		// reports the same readings, as with dcgm-exporter.
		for k := range s.MIGProfilingCount {
			mp := &s.MIGProfiling[k]
			if mp.GPUInstanceID != m.GPUInstanceID {
				continue
			}
			for f := range e.descs.prof {
				pf := &e.descs.prof[f]
				if mp.Has&pf.need != 0 {
					emit(e.metric(pf.migDesc, pairs, prometheus.GaugeValue, pf.value(&mp.Profiling)))
				}
			}
			break
		}
	}
}

// noteUnsupported logs, once per GPU, the series left out because the GPU
// does not offer their readings.
func (c *deviceCollector) noteUnsupported(i int, r gpu.Readings) {
	e := c.e
	uuid := e.devices[i].UUID
	known, seen := e.unsupported[uuid]
	if seen && r&^known == 0 {
		return
	}
	e.unsupported[uuid] = known | r
	if r&^known == 0 {
		return
	}
	var names []string
	for f := range e.descs.fields {
		if fd := &e.descs.fields[f]; fd.need != 0 && r&^known&fd.need != 0 {
			names = append(names, fd.name)
		}
	}
	e.log.Info("GPU does not offer these readings; their series are left out",
		"gpu", e.devices[i].Index, "uuid", uuid, "model", e.devices[i].Name, "series", names)
}
