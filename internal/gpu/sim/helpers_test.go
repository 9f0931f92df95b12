package sim

import (
	"testing"
	"time"
)

// t0 is the simulated start of every test.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestBackend starts a built-in profile on a manual clock.
func newTestBackend(t testing.TB, profile string) (*Backend, *ManualClock) {
	t.Helper()
	p, err := Load(profile)
	if err != nil {
		t.Fatalf("Load(%q): %v", profile, err)
	}
	clk := NewManualClock(t0)
	b, err := New(p, Options{NodeName: "node-a", Clock: clk})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, clk
}
