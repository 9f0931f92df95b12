package framework

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/adapter"
)

// RunScheduler runs gpuplane-scheduler in-process with cfg (logging to
// stderr under -v when cfg has no logger) until the returned function is
// called or the test ends, and fails the test if it stops with an error
// or does not stop within 30 s of being told to.
func RunScheduler(t testing.TB, cfg adapter.Config) (stop func()) {
	t.Helper()
	if cfg.Logger == nil && testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- adapter.Run(ctx, cfg) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("scheduler %s stopped with %v", cfg.SchedulerName, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("scheduler %s did not stop within 30s of its context ending", cfg.SchedulerName)
		}
	}
	t.Cleanup(stop)
	return stop
}
