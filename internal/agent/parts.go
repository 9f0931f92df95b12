package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/metrics"
)

// part is one long-running piece of the agent (device plugin, metrics
// server, labeler). run returns nil when ctx ends and an error when the
// part cannot go on.
type part struct {
	name string
	run  func(ctx context.Context) error
}

// runParts runs every part on one shared context until ctx ends or a part
// stops. A part that fails, or ends while the agent is not stopping, stops
// the others; the returned error names every part that failed.
func runParts(ctx context.Context, log *slog.Logger, parts []part) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	done := make(chan result, len(parts))
	for _, p := range parts {
		go func() { done <- result{name: p.name, err: p.run(ctx)} }()
	}
	var errs []error
	for range parts {
		r := <-done
		_, restart := isGPUAPISwitch(r.err)
		switch {
		case restart:
			log.Info("stopping the agent's parts to start them again", "part", r.name, "reason", r.err)
			errs = append(errs, r.err)
		case r.err != nil:
			log.Error("agent part failed; stopping the agent", "part", r.name, "err", r.err)
			errs = append(errs, fmt.Errorf("%s: %w", r.name, r.err))
		case ctx.Err() == nil:
			log.Error("agent part ended unexpectedly; stopping the agent", "part", r.name)
			errs = append(errs, fmt.Errorf("%s: stopped unexpectedly", r.name))
		default:
			log.Debug("agent part stopped", "part", r.name)
		}
		cancel()
	}
	return errors.Join(errs...)
}

// monitorHealth shows the device plugin's health monitor to the metrics
// exporter. The monitor only exists once the plugin has loaded its config,
// while metrics are served from the start; until then the monitor is
// reported as not running, with the reason "starting".
type monitorHealth struct {
	monitor atomic.Pointer[health.Monitor]
	// uuids are the node's GPUs and MIG devices, as the inventory listed
	// them at start.
	uuids []string
}

var _ metrics.HealthSource = (*monitorHealth)(nil)

func newMonitorHealth(devices []gpu.Device) *monitorHealth {
	h := &monitorHealth{}
	for _, d := range devices {
		h.uuids = append(h.uuids, d.UUID)
		for _, m := range d.MIGDevices {
			h.uuids = append(h.uuids, m.UUID)
		}
	}
	return h
}

func (h *monitorHealth) set(m *health.Monitor) { h.monitor.Store(m) }

// HealthState implements metrics.HealthSource. It lists unhealthy devices
// only: the exporter reports every device it does not find as healthy.
func (h *monitorHealth) HealthState() metrics.HealthState {
	m := h.monitor.Load()
	if m == nil {
		return metrics.HealthState{Reason: "starting"}
	}
	st := m.Status()
	out := metrics.HealthState{Running: st.Monitoring, Reason: st.Err, Unmonitored: len(st.Unmonitored)}
	if st.Disabled {
		out.Reason = "disabled"
	}
	for _, uuid := range h.uuids {
		if d, ok := m.Device(uuid); ok && !d.Healthy {
			out.Devices = append(out.Devices, metrics.DeviceHealth{UUID: uuid, Healthy: false, Reason: d.Reason})
		}
	}
	return out
}
