package agent

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuplane/gpuplane/internal/deviceplugin"
)

// liveGrace is how long the health monitor may receive no GPU events
// before /healthz fails and the kubelet restarts the agent, which opens
// NVML afresh.
const liveGrace = 2 * time.Minute

// probes answer the kubelet's probes from the agent's parts, served with
// the metrics (metrics.WithProbes).
//
//   - Ready (/readyz): the device plugin serves every resource and the
//     kubelet has registered them, and the health monitor receives the
//     GPUs' events (or is disabled by policy). The error says which part
//     is not and why.
//   - Live (/healthz): fails only for what a restart can mend: the health
//     monitor has received no events for liveGrace.
type probes struct {
	manager atomic.Pointer[deviceplugin.Manager]
	health  *monitorHealth
	// host holds the node's checks beyond the agent's parts; nil skips
	// them.
	host *hostChecks
	now  func() time.Time
	// withheld is set when the node's GPUs are served only through DRA
	// (gpunode.LabelGPUAPI): the device plugin registers no resource, and
	// that is not a fault.
	withheld atomic.Bool

	mu        sync.Mutex
	downSince time.Time
}

func newProbes(h *monitorHealth) *probes {
	return &probes{health: h, now: time.Now}
}

func (p *probes) setManager(m *deviceplugin.Manager) { p.manager.Store(m) }

func (p *probes) ready() error {
	var errs []error
	if p.withheld.Load() {
		// No resource to register: the GPUs are served through DRA.
	} else if m := p.manager.Load(); m == nil {
		errs = append(errs, errors.New("device plugin: starting (reading its config)"))
	} else if err := m.Ready(); err != nil {
		errs = append(errs, fmt.Errorf("device plugin: %w", err))
	}
	if mon := p.health.monitor.Load(); mon != nil {
		if st := mon.Status(); !st.Monitoring && !st.Disabled {
			errs = append(errs, fmt.Errorf("health monitor: not receiving GPU events: %s", st.Err))
		}
	}
	var registered []string
	if m := p.manager.Load(); m != nil {
		registered = slices.Sorted(maps.Keys(m.Registrations()))
	}
	if c := p.host.check(registered); c != nil {
		errs = append(errs, fmt.Errorf("node: %s: %s", c.reason, c.message))
	}
	return errors.Join(errs...)
}

func (p *probes) live() error {
	mon := p.health.monitor.Load()
	if mon == nil {
		return nil
	}
	st := mon.Status()
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.Monitoring || st.Disabled {
		p.downSince = time.Time{}
		return nil
	}
	now := p.now()
	if p.downSince.IsZero() {
		p.downSince = now
	}
	if d := now.Sub(p.downSince); d > liveGrace {
		return fmt.Errorf("health monitor: no GPU events for %s (%s); a restart opens NVML afresh", d.Round(time.Second), st.Err)
	}
	return nil
}
