package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// DeviceHealth is the health monitor's view of one GPU.
type DeviceHealth struct {
	UUID    string
	Healthy bool
	// Reason says why the GPU is unhealthy ("xid-79", "ecc-double-bit").
	Reason string
}

// HealthState is a snapshot of the health monitor.
type HealthState struct {
	// Running is true while the monitor watches GPU events.
	Running bool
	// Reason says why the monitor is not running.
	Reason string
	// Devices lists GPUs the monitor has an opinion on; a GPU it does not
	// list is reported healthy.
	Devices []DeviceHealth
	// Unmonitored counts GPUs whose events cannot be watched.
	Unmonitored int
}

// HealthSource reports the health monitor's state. The health package
// implements it; HealthState must be cheap and safe for concurrent use.
type HealthSource interface {
	HealthState() HealthState
}

// healthCollector emits gpuplane_device_healthy and the monitor's state.
type healthCollector struct{ e *Exporter }

var _ collector = (*healthCollector)(nil)

func (*healthCollector) Name() string { return "health" }

func (c *healthCollector) collect(_ context.Context, emit func(prometheus.Metric)) error {
	e := c.e
	if e.opts.Health == nil {
		return nil
	}
	st := e.opts.Health.HealthState()
	up := 0.0
	if st.Running {
		up = 1
		st.Reason = ""
	}
	emit(prometheus.MustNewConstMetric(e.descs.monitorUp, prometheus.GaugeValue, up, st.Reason))
	emit(prometheus.MustNewConstMetric(e.descs.unmonitored, prometheus.GaugeValue, float64(st.Unmonitored)))
	for i := range e.devices {
		healthy, reason := 1.0, ""
		for _, h := range st.Devices {
			if h.UUID == e.devices[i].UUID && !h.Healthy {
				healthy, reason = 0, h.Reason
				break
			}
		}
		emit(prometheus.MustNewConstMetric(e.descs.healthy, prometheus.GaugeValue, healthy, e.labelValues(i, reason)...))
	}
	return nil
}
