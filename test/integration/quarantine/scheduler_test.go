package quarantine_test

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// runGPUplaneScheduler runs gpuplane-scheduler in-process under its own
// name, with the CRDs from deploy/crds, until the returned function is
// called or the test ends.
func runGPUplaneScheduler(t *testing.T) (stop func()) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	env.InstallCRDs(t, filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds"))
	cfg := adapter.Config{RESTConfig: env.Config, SchedulerName: "gpuplane-scheduler", CycleInterval: 200 * time.Millisecond}
	return framework.RunScheduler(t, cfg)
}
