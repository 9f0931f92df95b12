package sim

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// recv returns the next event, failing the test if none comes in time.
func recv(t *testing.T, s gpu.Subscription) gpu.Event {
	t.Helper()
	select {
	case ev, ok := <-s.Events():
		if !ok {
			t.Fatal("subscription closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return gpu.Event{}
}

// waitClosed fails the test unless the channel is closed in time, draining
// any events still queued.
func waitClosed(t *testing.T, s gpu.Subscription) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.Events():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("events channel not closed within 10s")
		}
	}
}

func subscribe(t *testing.T, b *Backend) gpu.Subscription {
	t.Helper()
	s, err := b.Subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestInjectedEvents(t *testing.T) {
	ctx := context.Background()
	b := migBackend(t)
	gi, _ := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
	ci, _ := b.CreateComputeInstance(ctx, 0, gi.ID, "")
	s := subscribe(t, b)
	uuid := func(i int) string { return GPUUUID("node-a", i) }
	tests := []struct {
		name   string
		inject func() error
		want   gpu.Event
	}{
		{"xid", func() error { return b.InjectXID(3, 48) },
			gpu.Event{Kind: gpu.EventXID, UUID: uuid(3), Index: 3, XID: 48, GPUInstanceID: -1, ComputeInstanceID: -1, Time: t0}},
		{"mig xid", func() error { return b.InjectMIGXID(0, gi.ID, ci.ID, 43) },
			gpu.Event{Kind: gpu.EventXID, UUID: uuid(0), Index: 0, XID: 43, GPUInstanceID: gi.ID, ComputeInstanceID: ci.ID, Time: t0}},
		{"single-bit ecc", func() error { return b.InjectECC(5, false) },
			gpu.Event{Kind: gpu.EventECCSingleBit, UUID: uuid(5), Index: 5, GPUInstanceID: -1, ComputeInstanceID: -1, Time: t0}},
		{"double-bit ecc", func() error { return b.InjectECC(7, true) },
			gpu.Event{Kind: gpu.EventECCDoubleBit, UUID: uuid(7), Index: 7, GPUInstanceID: -1, ComputeInstanceID: -1, Time: t0}},
		{"gpu lost", func() error { return b.LoseGPU(6) },
			gpu.Event{Kind: gpu.EventXID, UUID: uuid(6), Index: 6, XID: XIDFallenOffBus, GPUInstanceID: -1, ComputeInstanceID: -1, Time: t0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.inject(); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, s); got != tt.want {
				t.Errorf("event\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if err := b.InjectMIGXID(0, 9, 0, 43); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("XID on a missing MIG device: %v", err)
	}
	if err := b.InjectXID(6, 1); !errors.Is(err, gpu.ErrGPULost) {
		t.Errorf("XID on a lost GPU: %v", err)
	}
}

func TestFailedEventWait(t *testing.T) {
	tests := []struct {
		name string
		n    int
	}{
		{"one failure", 1},
		{"several failures", 5},
		{"until cleared", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newTestBackend(t, "dgxh100")
			s := subscribe(t, b)
			if err := b.FailEventWait(tt.n); err != nil {
				t.Fatal(err)
			}
			ev := recv(t, s)
			if ev.Kind != gpu.EventMonitorError || ev.Index != -1 || ev.UUID != "" || !errors.Is(ev.Err, ErrInjected) {
				t.Fatalf("first event = %+v, want a monitor error", ev)
			}
			// Injected while waits fail: held until they work again.
			if err := b.InjectXID(2, 31); err != nil {
				t.Fatal(err)
			}
			if tt.n < 0 {
				b.ClearFaults()
			}
			if ev := recv(t, s); ev.Kind != gpu.EventMonitorRecovered || ev.Index != -1 {
				t.Fatalf("second event = %+v, want recovery", ev)
			}
			if ev := recv(t, s); ev.Kind != gpu.EventXID || ev.Index != 2 || ev.XID != 31 {
				t.Fatalf("third event = %+v, want the held XID", ev)
			}
		})
	}
}

func TestUnmonitoredGPUs(t *testing.T) {
	b, _ := newTestBackend(t, "dgxh100")
	if err := b.LoseGPU(1); err != nil {
		t.Fatal(err)
	}
	if err := b.FailCall(OpSubscribe, 4, nil); err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, b)
	un := s.Unmonitored()
	if len(un) != 2 || !errors.Is(un[GPUUUID("node-a", 1)], gpu.ErrGPULost) || !errors.Is(un[GPUUUID("node-a", 4)], ErrInjected) {
		t.Errorf("Unmonitored = %v", un)
	}
	if err := b.InjectXID(4, 13); err != nil {
		t.Fatal(err)
	}
	if err := b.InjectXID(3, 13); err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, s); ev.Index != 3 {
		t.Errorf("got %+v, want the event of GPU 3 (GPU 4 is unmonitored)", ev)
	}
}

func TestSubscriptionEnds(t *testing.T) {
	before := runtime.NumGoroutine()
	tests := []struct {
		name string
		end  func(b *Backend, s gpu.Subscription, cancel context.CancelFunc)
	}{
		{"close", func(_ *Backend, s gpu.Subscription, _ context.CancelFunc) { _ = s.Close(); _ = s.Close() }},
		{"context cancelled", func(_ *Backend, _ gpu.Subscription, cancel context.CancelFunc) { cancel() }},
		{"backend closed", func(b *Backend, _ gpu.Subscription, _ context.CancelFunc) { _ = b.Close() }},
		{"close with undelivered events", func(b *Backend, s gpu.Subscription, _ context.CancelFunc) {
			for range 100 {
				_ = b.InjectXID(0, 31)
			}
			_ = s.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newTestBackend(t, "dgxh100")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := b.Subscribe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tt.end(b, s, cancel)
			waitClosed(t, s)
			_ = s.Close()
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
	b, _ := newTestBackend(t, "dgxh100")
	_ = b.Close()
	if _, err := b.Subscribe(context.Background()); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Subscribe after Close: %v", err)
	}
}
