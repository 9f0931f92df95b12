package sim

import (
	"sync"
	"time"
)

// ManualClock is a Clock that moves only when told to, for deterministic
// tests. The zero value starts at the zero time; it is safe for concurrent
// use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

var _ Clock = (*ManualClock)(nil)

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now implements Clock.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
