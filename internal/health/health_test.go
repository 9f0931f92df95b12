package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPolicy(t *testing.T) {
	tests := []struct {
		name     string
		health   configv1.Health
		env      func(string) (string, bool)
		critical map[uint64]bool
		disabled bool
	}{
		{"defaults", configv1.Health{}, env(), map[uint64]bool{13: false, 31: false, 43: false, 45: false, 68: false, 109: false, 48: true, 79: true, 94: true}, false},
		{"disable all", configv1.Health{}, env(EnvDisableHealthChecks, "all"), map[uint64]bool{79: false}, true},
		{"disable xids", configv1.Health{}, env(EnvDisableHealthChecks, "xids"), map[uint64]bool{79: false}, true},
		{"disable a list", configv1.Health{}, env(EnvDisableHealthChecks, "48, 79"), map[uint64]bool{48: false, 79: false, 94: true}, false},
		{"enable all", configv1.Health{}, env(EnvEnableHealthChecks, "all"), map[uint64]bool{13: true, 109: true, 79: true}, false},
		{"enable all but disabled list", configv1.Health{}, env(EnvEnableHealthChecks, "all", EnvDisableHealthChecks, "13"), map[uint64]bool{13: false, 31: true}, false},
		{"enable a default-ignored XID", configv1.Health{}, env(EnvEnableHealthChecks, "31"), map[uint64]bool{31: true, 13: false}, false},
		{"enable wins over disable", configv1.Health{}, env(EnvEnableHealthChecks, "48", EnvDisableHealthChecks, "48"), map[uint64]bool{48: true}, false},
		{"config lists", configv1.Health{IgnoredXIDs: []uint64{94}, CriticalXIDs: []uint64{13}}, env(), map[uint64]bool{94: false, 13: true}, false},
		{"config disabled", configv1.Health{Disabled: true}, env(), map[uint64]bool{79: false}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPolicy(tc.health, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if p.Disabled != tc.disabled {
				t.Errorf("Disabled = %v, want %v", p.Disabled, tc.disabled)
			}
			for xid, want := range tc.critical {
				if got := p.Critical(xid); got != want {
					t.Errorf("Critical(%d) = %v, want %v", xid, got, want)
				}
			}
		})
	}
	t.Run("bad env", func(t *testing.T) {
		if _, err := NewPolicy(configv1.Health{}, env(EnvDisableHealthChecks, "x79")); err == nil {
			t.Fatal("want an error for a malformed XID list")
		}
	})
}

// fakeBackend is a node of GPUs whose events, lost GPUs and subscription
// failures the test controls.
type fakeBackend struct {
	gpu.Null
	mu           sync.Mutex
	events       chan gpu.Event
	lost         map[int]bool
	subscribeErr error
	subscribed   int
}

func newFake() *fakeBackend {
	return &fakeBackend{events: make(chan gpu.Event, 16), lost: map[int]bool{}}
}

func (f *fakeBackend) Subscribe(ctx context.Context) (gpu.Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subscribed++
	if f.subscribeErr != nil {
		return nil, f.subscribeErr
	}
	return &fakeSub{ch: f.events}, nil
}

func (f *fakeBackend) Sample(_ context.Context, index int, _ *gpu.Sample) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost[index] {
		return fmt.Errorf("gpu %d: %w", index, gpu.ErrGPULost)
	}
	return nil
}

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

type fakeSub struct{ ch chan gpu.Event }

func (s *fakeSub) Events() <-chan gpu.Event { return s.ch }
func (s *fakeSub) Unmonitored() map[string]error {
	return map[string]error{"GPU-3": errors.New("not supported")}
}
func (s *fakeSub) Close() error { return nil }

func devices() []gpu.Device {
	var out []gpu.Device
	for i := range 4 {
		d := gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i)}
		if i == 2 {
			d.MIGDevices = []gpu.MIGDevice{
				{UUID: "MIG-2a", GPUInstanceID: 1, ComputeInstanceID: 0},
				{UUID: "MIG-2b", GPUInstanceID: 2, ComputeInstanceID: 0},
			}
		}
		out = append(out, d)
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not a wait for an outcome
	}
}

type harness struct {
	fake  *fakeBackend
	clock *clocktesting.FakeClock
	mon   *Monitor
	reg   *prometheus.Registry
}

func start(t *testing.T, probation time.Duration, fake *fakeBackend) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	reg := prometheus.NewRegistry()
	policy, err := NewPolicy(configv1.Health{Probation: &configv1.Duration{Duration: probation}}, env())
	if err != nil {
		t.Fatal(err)
	}
	mon, err := NewMonitor(fake, devices(), Options{Policy: policy, CheckInterval: time.Second, RetryInterval: 3 * time.Second, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mon.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &harness{fake: fake, clock: clk, mon: mon, reg: reg}
}

func xid(index int, code uint64, gi, ci int) gpu.Event {
	return gpu.Event{Kind: gpu.EventXID, UUID: fmt.Sprintf("GPU-%d", index), Index: index, XID: code, GPUInstanceID: gi, ComputeInstanceID: ci}
}

func TestMonitorEvents(t *testing.T) {
	tests := []struct {
		name      string
		event     gpu.Event
		unhealthy []string
		healthy   []string
	}{
		{"critical XID", xid(1, 79, -1, -1), []string{"GPU-1"}, []string{"GPU-0", "GPU-2", "MIG-2a"}},
		{"ignored XID", xid(1, 13, -1, -1), nil, []string{"GPU-1"}},
		{"XID on a MIG device", xid(2, 94, 2, 0), []string{"MIG-2b"}, []string{"GPU-2", "MIG-2a"}},
		{"XID on a MIG GPU takes its MIG devices", xid(2, 48, -1, -1), []string{"GPU-2", "MIG-2a", "MIG-2b"}, []string{"GPU-1"}},
		{"double-bit ECC", gpu.Event{Kind: gpu.EventECCDoubleBit, UUID: "GPU-0", Index: 0, GPUInstanceID: -1, ComputeInstanceID: -1}, []string{"GPU-0"}, []string{"GPU-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, time.Minute, newFake())
			changes, stop := h.mon.Changes()
			defer stop()
			eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
			h.fake.events <- tc.event
			if len(tc.unhealthy) > 0 {
				<-changes
			}
			// An ignored event leaves no trace; a marker event after it
			// proves it was processed.
			h.fake.events <- xid(3, 79, -1, -1)
			eventually(t, "marker", func() bool { return !h.mon.Healthy("GPU-3") })
			for _, u := range tc.unhealthy {
				if h.mon.Healthy(u) {
					t.Errorf("%s healthy, want unhealthy", u)
				}
			}
			for _, u := range tc.healthy {
				if !h.mon.Healthy(u) {
					t.Errorf("%s unhealthy, want healthy", u)
				}
			}
		})
	}
}

func TestMonitorRecovery(t *testing.T) {
	t.Run("recovers after probation", func(t *testing.T) {
		h := start(t, 30*time.Second, newFake())
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		h.fake.events <- xid(1, 79, -1, -1)
		eventually(t, "unhealthy", func() bool { return !h.mon.Healthy("GPU-1") })
		h.clock.Step(10 * time.Second)
		h.clock.Step(time.Second) // a probe before probation ends
		if h.mon.Healthy("GPU-1") {
			t.Fatal("recovered before probation")
		}
		h.clock.Step(25 * time.Second)
		eventually(t, "recovery", func() bool { return h.mon.Healthy("GPU-1") })
	})
	t.Run("a lost GPU does not recover while lost", func(t *testing.T) {
		fake := newFake()
		h := start(t, 5*time.Second, fake)
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		fake.set(func(f *fakeBackend) { f.lost[0] = true })
		h.clock.Step(time.Second)
		eventually(t, "lost", func() bool { d, _ := h.mon.Device("GPU-0"); return d.Reason == "lost" })
		for range 3 {
			h.clock.Step(10 * time.Second)
		}
		if h.mon.Healthy("GPU-0") {
			t.Fatal("lost GPU recovered while still lost")
		}
		fake.set(func(f *fakeBackend) { f.lost[0] = false })
		h.clock.Step(10 * time.Second)
		eventually(t, "back on the bus", func() bool { return h.mon.Healthy("GPU-0") })
	})
	t.Run("probation zero never recovers", func(t *testing.T) {
		h := start(t, 0, newFake())
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		h.fake.events <- xid(1, 79, -1, -1)
		eventually(t, "unhealthy", func() bool { return !h.mon.Healthy("GPU-1") })
		h.clock.Step(time.Hour)
		h.fake.events <- xid(3, 79, -1, -1) // marker: the probe ran before it
		eventually(t, "marker", func() bool { return !h.mon.Healthy("GPU-3") })
		if h.mon.Healthy("GPU-1") {
			t.Fatal("recovered with probation 0")
		}
	})
}

func TestMonitorFailureIsLoud(t *testing.T) {
	fake := newFake()
	fake.subscribeErr = errors.New("nvml: event set unsupported")
	h := start(t, time.Minute, fake)
	eventually(t, "failed subscription", func() bool { return h.mon.Status().Err != "" })
	s := h.mon.Status()
	if s.Monitoring {
		t.Error("Monitoring true after a failed subscribe")
	}
	fake.set(func(f *fakeBackend) { f.subscribeErr = nil })
	eventually(t, "retry timer", func() bool { return h.clock.HasWaiters() })
	h.clock.Step(3 * time.Second)
	eventually(t, "monitoring after retry", func() bool { return h.mon.Status().Monitoring })
	if s := h.mon.Status(); s.Unmonitored["GPU-3"] == "" {
		t.Errorf("unmonitored GPUs not reported: %+v", s)
	}
	h.fake.events <- gpu.Event{Kind: gpu.EventMonitorError, Err: errors.New("wait failed"), Index: -1}
	eventually(t, "monitor error reported", func() bool { return !h.mon.Status().Monitoring })
	h.fake.events <- gpu.Event{Kind: gpu.EventMonitorRecovered, Index: -1}
	eventually(t, "monitor recovered", func() bool { return h.mon.Status().Monitoring })
}

func TestMonitorHoldAndFaults(t *testing.T) {
	t.Run("faults reach the reader, also for an unhealthy device", func(t *testing.T) {
		h := start(t, time.Minute, newFake())
		faults, stop := h.mon.Faults()
		defer stop()
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		h.fake.events <- xid(1, 79, -1, -1)
		h.fake.events <- xid(1, 94, -1, -1)
		h.fake.events <- xid(2, 48, 2, 0) // MIG device of GPU 2
		h.fake.events <- gpu.Event{Kind: gpu.EventECCDoubleBit, UUID: "GPU-0", Index: 0, GPUInstanceID: -1, ComputeInstanceID: -1}
		want := []Fault{{GPU: 1, UUID: "GPU-1", XID: 79}, {GPU: 1, UUID: "GPU-1", XID: 94}, {GPU: 2, UUID: "GPU-2", XID: 48}, {GPU: 0, UUID: "GPU-0", XID: XIDDoubleBitECC}}
		for i, w := range want {
			f := <-faults
			if f.GPU != w.GPU || f.UUID != w.UUID || f.XID != w.XID {
				t.Errorf("fault %d = %+v, want %+v", i, f, w)
			}
		}
	})
	t.Run("a late reader gets the faults of GPUs still unhealthy", func(t *testing.T) {
		h := start(t, 5*time.Second, newFake())
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		h.fake.events <- xid(1, 79, -1, -1)
		eventually(t, "GPU 1 unhealthy", func() bool { return !h.mon.Healthy("GPU-1") })
		h.clock.Step(10 * time.Second) // GPU 1 recovers on probation
		eventually(t, "GPU 1 healthy", func() bool { return h.mon.Healthy("GPU-1") })
		h.fake.events <- xid(2, 48, 2, 0) // MIG device of GPU 2
		h.fake.events <- xid(3, 94, -1, -1)
		h.fake.events <- xid(3, 48, -1, -1)
		eventually(t, "GPUs 2 and 3 unhealthy", func() bool { return !h.mon.Healthy("MIG-2b") && !h.mon.Healthy("GPU-3") })
		faults, stop := h.mon.Faults()
		defer stop()
		var got []Fault
		for len(faults) > 0 {
			got = append(got, <-faults)
		}
		if len(got) != 2 || got[0].UUID != "GPU-2" || got[0].XID != 48 || got[1].UUID != "GPU-3" || got[1].XID != 48 {
			t.Fatalf("replayed %+v, want GPU-2's XID 48 then GPU-3's last fault (XID 48)", got)
		}
		// Later faults follow the replay.
		h.fake.events <- xid(0, 79, -1, -1)
		if f := <-faults; f.UUID != "GPU-0" {
			t.Fatalf("fault after the replay = %+v", f)
		}
	})
	t.Run("a lost GPU is an XID 79 fault", func(t *testing.T) {
		fake := newFake()
		h := start(t, time.Minute, fake)
		faults, stop := h.mon.Faults()
		defer stop()
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		fake.set(func(f *fakeBackend) { f.lost[3] = true })
		h.clock.Step(time.Second)
		f := <-faults
		if f.GPU != 3 || f.XID != XIDFallenOffBus || f.Reason != "lost" {
			t.Fatalf("fault = %+v", f)
		}
	})
	t.Run("a held GPU outlasts probation until released", func(t *testing.T) {
		h := start(t, 5*time.Second, newFake())
		eventually(t, "monitoring", func() bool { return h.mon.Status().Monitoring })
		h.fake.events <- xid(2, 79, -1, -1)
		eventually(t, "unhealthy", func() bool { return !h.mon.Healthy("GPU-2") })
		h.mon.Hold("GPU-2", "quarantined")
		for range 3 {
			h.clock.Step(10 * time.Second)
		}
		h.fake.events <- xid(3, 79, -1, -1) // marker: the probes ran before it
		eventually(t, "marker", func() bool { return !h.mon.Healthy("GPU-3") })
		if h.mon.Healthy("GPU-2") || h.mon.Healthy("MIG-2a") {
			t.Fatal("a held GPU recovered on probation")
		}
		changes, stop := h.mon.Changes()
		defer stop()
		h.mon.Release("GPU-2")
		<-changes
		if !h.mon.Healthy("GPU-2") || !h.mon.Healthy("MIG-2b") {
			t.Fatal("a released GPU is not healthy")
		}
	})
	t.Run("hold takes a healthy GPU out", func(t *testing.T) {
		h := start(t, 5*time.Second, newFake())
		h.mon.Hold("GPU-0", "quarantined")
		if h.mon.Healthy("GPU-0") {
			t.Fatal("held GPU healthy")
		}
	})
}
