package quarantine_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/adapter"
)

// runGPUplaneScheduler runs gpuplane-scheduler in-process under its own
// name, with the CRDs from deploy/crds, until the returned function is
// called or the test ends.
func runGPUplaneScheduler(t *testing.T) (stop func()) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	env.InstallCRDs(t, filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds"))
	cfg := adapter.Config{RESTConfig: env.Config, SchedulerName: "gpuplane-scheduler", CycleInterval: 200 * time.Millisecond}
	if testing.Verbose() {
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
				t.Errorf("gpuplane-scheduler stopped with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("gpuplane-scheduler did not stop within 30s of its context ending")
		}
	}
	t.Cleanup(stop)
	return stop
}
