package labels

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// recordingSink fails the first failures writes, then records each write.
type recordingSink struct {
	mu       sync.Mutex
	failures int
	attempts int
	writes   []Labels
}

func (s *recordingSink) Name() string { return "recording" }

func (s *recordingSink) Write(_ context.Context, labels, _ Labels) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.failures > 0 {
		s.failures--
		return errors.New("connection refused")
	}
	s.writes = append(s.writes, labels)
	return nil
}

func (s *recordingSink) counts() (attempts, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts, len(s.writes)
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not a wait for an event
	}
}

func newTestRunner(t *testing.T, sink Sink, inv *fakeInventory, clk *clocktesting.FakeClock) *Runner {
	t.Helper()
	ls, err := New(Config{MachineTypeFile: "/nonexistent", SysfsRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(RunnerOptions{
		Inventory: inv, Labelers: ls, Sink: sink, Interval: time.Minute,
		InitialBackoff: time.Second, MaxBackoff: 4 * time.Second, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunnerBacksOffWhileTheSinkFails(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sink := &recordingSink{failures: 4}
	r := newTestRunner(t, sink, &fakeInventory{in: dgxH100().in}, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	// Failed attempts wait 1s, 2s, 4s, 4s (capped) before the next one.
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		waitFor(t, "the runner to wait", clk.HasWaiters)
		if a, _ := sink.counts(); a != i+1 {
			t.Fatalf("attempts = %d before backoff %d, want %d", a, i, i+1)
		}
		clk.Step(backoff - time.Nanosecond)
		if a, _ := sink.counts(); a != i+1 {
			t.Fatalf("retried before the %v backoff elapsed", backoff)
		}
		clk.Step(time.Nanosecond)
	}
	waitFor(t, "a successful write", func() bool { _, w := sink.counts(); return w == 1 })
	// Then one pass per interval.
	waitFor(t, "the runner to wait", clk.HasWaiters)
	clk.Step(time.Minute)
	waitFor(t, "the second write", func() bool { _, w := sink.counts(); return w == 2 })

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if sink.writes[0]["nvidia.com/gpu.count"] != "8" {
		t.Errorf("written labels = %v", sink.writes[0])
	}
}

func TestRunnerOnce(t *testing.T) {
	tests := []struct {
		name      string
		invErr    error
		failures  int
		cancel    bool
		wantErr   bool
		wantWrite int
	}{
		{name: "succeeds first time", wantWrite: 1},
		{name: "inventory fails until cancelled", invErr: errors.New("gpu lost"), cancel: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			sink := &recordingSink{failures: tt.failures}
			r := newTestRunner(t, sink, &fakeInventory{in: dgxH100().in, err: tt.invErr}, clk)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Once(ctx) }()
			if tt.cancel {
				waitFor(t, "the runner to back off", clk.HasWaiters)
				cancel()
			}
			err := <-done
			if (err != nil) != tt.wantErr {
				t.Fatalf("Once = %v, wantErr %v", err, tt.wantErr)
			}
			if _, w := sink.counts(); w != tt.wantWrite {
				t.Errorf("writes = %d, want %d", w, tt.wantWrite)
			}
		})
	}
}

func TestNewRunnerRejects(t *testing.T) {
	ls, _ := New(Config{})
	inv := &fakeInventory{in: dgxH100().in}
	tests := []struct {
		name string
		opts RunnerOptions
	}{
		{name: "no inventory", opts: RunnerOptions{Labelers: ls, Sink: &recordingSink{}}},
		{name: "no sink", opts: RunnerOptions{Inventory: inv, Labelers: ls}},
		{name: "no labelers", opts: RunnerOptions{Inventory: inv, Sink: &recordingSink{}}},
		{name: "negative interval", opts: RunnerOptions{Inventory: inv, Labelers: ls, Sink: &recordingSink{}, Interval: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewRunner(tt.opts); err == nil {
				t.Fatal("NewRunner accepted invalid options")
			}
		})
	}
}
