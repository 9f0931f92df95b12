package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// PollInterval is how often the waiting helpers re-check their condition.
const PollInterval = 50 * time.Millisecond

// ErrTimeout is returned (wrapped) when a condition did not hold in time.
var ErrTimeout = errors.New("timed out")

// Condition reports whether what is awaited has happened. An error is kept as
// the reason for a later timeout, not as a failure: the API server may still
// be catching up.
type Condition func(ctx context.Context) (done bool, err error)

// Poll checks cond every PollInterval until it holds or timeout passes (or
// ctx ends). The error names what was awaited and the last reason it did not
// hold.
func Poll(ctx context.Context, timeout time.Duration, what string, cond Condition) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(PollInterval)
	defer ticker.Stop()
	var last error
	for {
		done, err := cond(ctx)
		if done {
			return nil
		}
		// An error caused by the deadline itself (a client refusing to wait
		// past it) says nothing about the condition; keep the one before.
		if deadline, _ := ctx.Deadline(); err != nil && time.Until(deadline) > PollInterval && !deadlineErr(err) {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting %v for %s: %w (last: %w)", timeout, what, ErrTimeout, last)
			}
			return fmt.Errorf("waiting %v for %s: %w", timeout, what, ErrTimeout)
		case <-ticker.C:
		}
	}
}

// deadlineErr reports whether err comes from a context ending rather than
// from the condition. client-go's rate limiter refuses, without waiting, a
// request it could only send after the deadline; its error wraps nothing.
func deadlineErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "would exceed context deadline")
}

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Context() context.Context
}

// Eventually is Poll that fails the test or benchmark when cond never holds.
func Eventually(tb TB, timeout time.Duration, what string, cond Condition) {
	tb.Helper()
	if err := Poll(tb.Context(), timeout, what, cond); err != nil {
		tb.Fatalf("%v", err)
	}
}
