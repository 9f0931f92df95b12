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
		pairs := e.devicePairs(i, ctr, ns, pod)
		for f := range e.descs.fields {
			fd := &e.descs.fields[f]
			v := fd.value(s)
			if fd.skipZero && v == 0 {
				continue
			}
			emit(e.metric(fd.desc, pairs, fd.typ, v))
		}
		if d.MIG.Current {
			c.emitMIG(i, emit)
		}
	}
	return nil
}

// emitMIG emits the framebuffer used and free of each MIG device, summed
// from the processes in its GPU instance.
func (c *deviceCollector) emitMIG(i int, emit func(prometheus.Metric)) {
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
		pairs := e.migPairs(i, m.Profile, itoa(m.GPUInstanceID), ctr, ns, pod)
		free := uint64(0)
		if m.MemoryMiB > used {
			free = m.MemoryMiB - used
		}
		emit(e.metric(e.descs.migFBUsed, pairs, prometheus.GaugeValue, float64(used)))
		emit(e.metric(e.descs.migFBFree, pairs, prometheus.GaugeValue, float64(free)))
	}
}
