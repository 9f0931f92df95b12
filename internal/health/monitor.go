package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Defaults of Options.
const (
	DefaultCheckInterval = 5 * time.Second
	DefaultRetryInterval = 5 * time.Second
)

// DeviceHealth is the health of one GPU or MIG device.
type DeviceHealth struct {
	UUID    string
	Healthy bool
	// Reason says why the device is unhealthy ("xid 79", "lost").
	Reason string
	// Since is when the last critical event or failed probe happened.
	Since time.Time
}

// Status is the state of the monitoring itself.
type Status struct {
	// Monitoring is true while events are being received.
	Monitoring bool
	// Err says why monitoring is down.
	Err string
	// Unmonitored lists GPUs whose events could not be registered.
	Unmonitored map[string]string
	// Disabled is true when health checks are switched off by policy.
	Disabled bool
}

// Options configure a Monitor.
type Options struct {
	Policy Policy
	// CheckInterval is how often GPUs are probed (lost GPUs, recovery).
	CheckInterval time.Duration
	// RetryInterval is the wait before subscribing again after a failure.
	RetryInterval time.Duration
	Clock         clock.WithTicker
	Logger        *slog.Logger
	// Registerer receives the monitor's metrics when set.
	Registerer prometheus.Registerer
}

type deviceState struct {
	gpuIndex int
	parent   string // parent GPU UUID for MIG devices, "" for GPUs
	health   DeviceHealth
}

// Monitor tracks device health. Create it with NewMonitor and run it with
// Run; its read methods are safe for concurrent use.
type Monitor struct {
	backend gpu.Backend
	opts    Options
	log     *slog.Logger
	events  *prometheus.CounterVec

	mu        sync.Mutex
	devices   map[string]*deviceState // by GPU or MIG UUID
	migByID   map[[3]int]string       // (gpu, gi, ci) -> MIG UUID
	status    Status
	listeners map[chan struct{}]struct{}
	// held are GPUs (by UUID) kept unhealthy by Hold.
	held map[string]string
	// faults receive every critical event.
	faults map[chan Fault]struct{}
	// standing is the last fault of each GPU (by UUID), replayed to a
	// reader that subscribes after it while the GPU is still unhealthy.
	standing map[string]Fault
}

// Fault is one critical event on a GPU, as the monitor acted on it.
type Fault struct {
	// GPU and UUID name the physical GPU (the parent of a MIG device).
	GPU  int
	UUID string
	// XID is the event's XID: 48 for a double-bit ECC error, 79 for a GPU
	// a probe found off the bus.
	XID uint64
	// Reason is the device's unhealthy reason ("xid 79", "lost").
	Reason string
	Time   time.Time
}

// faultBuffer bounds the faults queued for a slow reader; more are
// dropped with a log line (the device stays unhealthy all the same).
const faultBuffer = 256

// NewMonitor prepares a monitor for the given devices (as the inventory
// reported them); every device starts healthy.
func NewMonitor(backend gpu.Backend, devices []gpu.Device, opts Options) (*Monitor, error) {
	if backend == nil {
		return nil, errors.New("health monitor: no GPU backend")
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{
		backend: backend, opts: opts, log: opts.Logger,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_health_critical_events_total",
			Help: "Critical GPU events that made a device unhealthy, by kind and XID.",
		}, []string{"kind", "xid"}),
		devices:   map[string]*deviceState{},
		migByID:   map[[3]int]string{},
		listeners: map[chan struct{}]struct{}{},
		held:      map[string]string{},
		faults:    map[chan Fault]struct{}{},
		standing:  map[string]Fault{},
		status:    Status{Disabled: opts.Policy.Disabled},
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{m.events} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("health monitor: registering metrics: %w", err)
			}
		}
	}
	for _, d := range devices {
		m.devices[d.UUID] = &deviceState{gpuIndex: d.Index, health: DeviceHealth{UUID: d.UUID, Healthy: true}}
		for _, mig := range d.MIGDevices {
			m.devices[mig.UUID] = &deviceState{gpuIndex: d.Index, parent: d.UUID, health: DeviceHealth{UUID: mig.UUID, Healthy: true}}
			m.migByID[[3]int{d.Index, mig.GPUInstanceID, mig.ComputeInstanceID}] = mig.UUID
		}
	}
	return m, nil
}

// Healthy reports whether a GPU or MIG device (by UUID) is healthy; a MIG
// device is unhealthy when its GPU is. Unknown UUIDs are unhealthy.
func (m *Monitor) Healthy(uuid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.devices[uuid]
	if !ok {
		return false
	}
	if !d.health.Healthy {
		return false
	}
	if _, held := m.held[uuid]; held {
		return false
	}
	if d.parent != "" {
		if p, ok := m.devices[d.parent]; ok && !p.health.Healthy {
			return false
		}
		if _, held := m.held[d.parent]; held {
			return false
		}
	}
	return true
}

// Faults returns a channel that receives every critical event the
// monitor acts on, also for a device already unhealthy, and a function
// that stops them. A reader that subscribes late first gets the last
// fault of each GPU that is still unhealthy: a fault in the moment
// between the monitor starting and its reader subscribing is not lost.
func (m *Monitor) Faults() (<-chan Fault, func()) {
	ch := make(chan Fault, faultBuffer)
	m.mu.Lock()
	var replay []Fault
	for uuid, f := range m.standing {
		if m.gpuUnhealthy(uuid) {
			replay = append(replay, f)
		} else {
			delete(m.standing, uuid)
		}
	}
	slices.SortFunc(replay, func(a, b Fault) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return a.GPU - b.GPU
	})
	for _, f := range replay[:min(len(replay), faultBuffer)] {
		ch <- f
	}
	m.faults[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.faults, ch)
		m.mu.Unlock()
	}
}

// gpuUnhealthy reports whether a GPU or one of its MIG devices is
// unhealthy or held; it must be called with m.mu held.
func (m *Monitor) gpuUnhealthy(uuid string) bool {
	if _, ok := m.held[uuid]; ok {
		return true
	}
	for id, d := range m.devices {
		if (id == uuid || d.parent == uuid) && !d.health.Healthy {
			return true
		}
	}
	return false
}

// fault must be called with m.mu held.
func (m *Monitor) fault(f Fault) {
	m.standing[f.UUID] = f // f.UUID is one of m.devices: bounded
	for ch := range m.faults {
		select {
		case ch <- f:
		default:
			m.log.Error("a critical GPU event was not passed on: its reader is behind", "uuid", f.UUID, "reason", f.Reason)
		}
	}
}

// Hold keeps a GPU (by UUID) and its MIG devices unhealthy, whatever the
// probation says, until Release: the quarantine holds a GPU it has taken
// out of service.
func (m *Monitor) Hold(uuid, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[uuid]; ok {
		m.held[uuid] = reason
		return
	}
	m.held[uuid] = reason
	if d, ok := m.devices[uuid]; ok && d.health.Healthy {
		d.health = DeviceHealth{UUID: uuid, Reason: reason, Since: m.opts.Clock.Now()}
	}
	m.log.Info("GPU held out of service", "uuid", uuid, "reason", reason)
	m.notify()
}

// Release ends Hold: the GPU and its MIG devices are healthy again at
// once (the holder has revalidated the GPU).
func (m *Monitor) Release(uuid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[uuid]; !ok {
		return
	}
	delete(m.held, uuid)
	now := m.opts.Clock.Now()
	for id, d := range m.devices {
		if id == uuid || d.parent == uuid {
			d.health = DeviceHealth{UUID: id, Healthy: true, Since: now}
		}
	}
	m.log.Info("GPU released into service", "uuid", uuid)
	m.notify()
}

// Device returns the health record of a device.
func (m *Monitor) Device(uuid string) (DeviceHealth, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.devices[uuid]
	if !ok {
		return DeviceHealth{}, false
	}
	return d.health, true
}

// Status returns the state of the monitoring.
func (m *Monitor) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.status
	s.Unmonitored = maps.Clone(m.status.Unmonitored)
	return s
}

// Changes returns a channel that receives a value (coalesced) whenever a
// device's health changes, and a function that stops the notifications.
func (m *Monitor) Changes() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.listeners[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.listeners, ch)
		m.mu.Unlock()
	}
}

// notify must be called with m.mu held.
func (m *Monitor) notify() {
	for ch := range m.listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run watches events and probes devices until ctx ends. It returns nil
// when ctx ends; monitoring failures are reported through Status and logs
// and retried, never returned.
func (m *Monitor) Run(ctx context.Context) error {
	if m.opts.Policy.Disabled {
		m.log.Warn("GPU health checks are disabled; every device is reported healthy", "env", EnvDisableHealthChecks)
		<-ctx.Done()
		return nil
	}
	ticker := m.opts.Clock.NewTicker(m.opts.CheckInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		sub, err := m.backend.Subscribe(ctx)
		if err != nil {
			m.setDown(fmt.Errorf("subscribing to GPU events: %w", err))
			if !m.waitRetry(ctx, ticker) {
				return nil
			}
			continue
		}
		m.setUp(sub.Unmonitored())
		m.consume(ctx, sub, ticker)
		_ = sub.Close()
		if ctx.Err() == nil {
			m.setDown(errors.New("the GPU event subscription ended unexpectedly"))
			if !m.waitRetry(ctx, ticker) {
				return nil
			}
		}
	}
	return nil
}

// waitRetry waits RetryInterval, probing devices on ticks meanwhile.
func (m *Monitor) waitRetry(ctx context.Context, ticker clock.Ticker) bool {
	retry := m.opts.Clock.After(m.opts.RetryInterval)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-retry:
			return true
		case <-ticker.C():
			m.probe(ctx)
		}
	}
}

func (m *Monitor) consume(ctx context.Context, sub gpu.Subscription, ticker clock.Ticker) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			m.handle(ev)
		case <-ticker.C():
			m.probe(ctx)
		}
	}
}

func (m *Monitor) setDown(err error) {
	m.mu.Lock()
	m.status.Monitoring, m.status.Err = false, err.Error()
	m.mu.Unlock()
	m.log.Error("GPU health monitoring is NOT working; device health is unknown until it recovers", "err", err)
}

func (m *Monitor) setUp(unmonitored map[string]error) {
	m.mu.Lock()
	m.status.Monitoring, m.status.Err = true, ""
	m.status.Unmonitored = nil
	for uuid, err := range unmonitored {
		if m.status.Unmonitored == nil {
			m.status.Unmonitored = map[string]string{}
		}
		m.status.Unmonitored[uuid] = err.Error()
	}
	m.mu.Unlock()
	for uuid, err := range unmonitored {
		m.log.Error("GPU events cannot be watched on this GPU; its health is not monitored", "uuid", uuid, "err", err)
	}
	m.log.Info("GPU health monitoring started")
}

// handle applies one event.
func (m *Monitor) handle(ev gpu.Event) {
	switch ev.Kind {
	case gpu.EventMonitorError:
		err := ev.Err
		if err == nil {
			err = errors.New("unknown error")
		}
		m.setDown(fmt.Errorf("waiting for GPU events: %w", err))
		return
	case gpu.EventMonitorRecovered:
		m.mu.Lock()
		m.status.Monitoring, m.status.Err = true, ""
		m.mu.Unlock()
		m.log.Info("GPU health monitoring recovered")
		return
	case gpu.EventXID:
		if !m.opts.Policy.Critical(ev.XID) {
			m.log.Info("ignoring non-critical XID", "uuid", ev.UUID, "xid", ev.XID)
			return
		}
	case gpu.EventECCDoubleBit:
	default:
		return
	}
	reason := ev.Kind.String()
	if ev.Kind == gpu.EventXID {
		reason = "xid " + strconv.FormatUint(ev.XID, 10)
	}
	m.events.WithLabelValues(ev.Kind.String(), strconv.FormatUint(ev.XID, 10)).Inc()
	now := m.opts.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	uuid := ev.UUID
	if ev.GPUInstanceID >= 0 && ev.ComputeInstanceID >= 0 {
		if mig, ok := m.migByID[[3]int{ev.Index, ev.GPUInstanceID, ev.ComputeInstanceID}]; ok {
			uuid = mig
		}
	}
	d, ok := m.devices[uuid]
	if !ok {
		m.log.Warn("critical GPU event for an unknown device", "uuid", ev.UUID, "index", ev.Index, "reason", reason)
		return
	}
	was := d.health.Healthy
	d.health = DeviceHealth{UUID: uuid, Healthy: false, Reason: reason, Since: now}
	m.log.Error("device is unhealthy", "uuid", uuid, "reason", reason, "probation", m.opts.Policy.Probation)
	if was {
		m.notify()
	}
	code := ev.XID
	if ev.Kind == gpu.EventECCDoubleBit {
		code = XIDDoubleBitECC
	}
	gpuUUID := uuid
	if d.parent != "" {
		gpuUUID = d.parent
	}
	m.fault(Fault{GPU: d.gpuIndex, UUID: gpuUUID, XID: code, Reason: reason, Time: now})
}

// XIDs the monitor gives faults that come without one.
const (
	// XIDDoubleBitECC is NVIDIA's XID of a double-bit ECC error.
	XIDDoubleBitECC = 48
	// XIDFallenOffBus is NVIDIA's XID of a GPU that fell off the bus.
	XIDFallenOffBus = 79
)

// isHeld must be called with m.mu held.
func (m *Monitor) isHeld(uuid string, d *deviceState) bool {
	if _, ok := m.held[uuid]; ok {
		return true
	}
	_, ok := m.held[d.parent]
	return ok && d.parent != ""
}

// probe checks every GPU: one that does not answer becomes unhealthy; an
// unhealthy one past probation that answers becomes healthy.
func (m *Monitor) probe(ctx context.Context) {
	type target struct {
		uuid  string
		index int
	}
	now := m.opts.Clock.Now()
	var gpus []target
	m.mu.Lock()
	for uuid, d := range m.devices {
		if d.parent == "" {
			gpus = append(gpus, target{uuid, d.gpuIndex})
		}
	}
	m.mu.Unlock()
	var sample gpu.Sample
	for _, g := range gpus {
		err := m.backend.Sample(ctx, g.index, &sample)
		lost := errors.Is(err, gpu.ErrGPULost)
		m.mu.Lock()
		changed := false
		for uuid, d := range m.devices {
			if uuid != g.uuid && d.parent != g.uuid {
				continue
			}
			switch {
			case lost && (d.health.Healthy || d.health.Reason != "lost"):
				changed = changed || d.health.Healthy
				d.health = DeviceHealth{UUID: uuid, Reason: "lost", Since: now}
				m.log.Error("GPU is lost (fell off the bus)", "uuid", uuid, "index", g.index)
				if uuid == g.uuid {
					m.fault(Fault{GPU: g.index, UUID: g.uuid, XID: XIDFallenOffBus, Reason: "lost", Time: now})
				}
			case !lost && err == nil && !d.health.Healthy && m.isHeld(uuid, d):
				// The holder decides when it returns.
			case !lost && err == nil && !d.health.Healthy && m.opts.Policy.Probation > 0 && now.Sub(d.health.Since) >= m.opts.Policy.Probation:
				m.log.Info("device is healthy again after probation", "uuid", uuid, "was", d.health.Reason, "probation", m.opts.Policy.Probation)
				d.health = DeviceHealth{UUID: uuid, Healthy: true, Since: now}
				changed = true
			}
		}
		if changed {
			m.notify()
		}
		m.mu.Unlock()
	}
}
