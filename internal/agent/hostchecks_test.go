package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestHostChecks(t *testing.T) {
	devRoot, cdiDir := t.TempDir(), t.TempDir()
	devices := []gpu.Device{{Index: 0, Minor: 0}, {Index: 1, Minor: 1, MIG: gpu.MIGMode{Capable: true}}}
	now := time.Now()
	h := newHostChecks(nil, devices, devRoot, cdiDir)
	h.now = func() time.Time { return now } // no refresh: the backend is never asked
	registered := []string{gpunode.ResourceGPU}

	reason := func() string {
		if c := h.check(registered); c != nil {
			return c.reason + ": " + c.message
		}
		return ""
	}
	if got := reason(); !strings.HasPrefix(got, gpunode.ReasonDeviceNodesMissing) || !strings.Contains(got, "/dev/nvidiactl, /dev/nvidia0, /dev/nvidia1") {
		t.Fatalf("no device nodes: %q", got)
	}
	if err := os.MkdirAll(filepath.Join(devRoot, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nvidiactl", "nvidia0", "nvidia1"} {
		if err := os.WriteFile(filepath.Join(devRoot, "dev", n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.devices[1].MIG.Pending = true
	if got := reason(); !strings.HasPrefix(got, gpunode.ReasonMIGModeChangePending) || !strings.Contains(got, "GPU 1 (MIG off, on after a reset)") {
		t.Fatalf("MIG change pending: %q", got)
	}
	h.devices[1].MIG.Current = true
	if got := reason(); !strings.HasPrefix(got, gpunode.ReasonCDISpecsMissing) || !strings.Contains(got, gpunode.ResourceGPU) {
		t.Fatalf("no CDI spec: %q", got)
	}
	if err := os.WriteFile(cdi.SpecPath(cdiDir, gpunode.ResourceGPU), []byte("cdiVersion: 0.6.0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := reason(); got != "" {
		t.Fatalf("every check passes, got %q", got)
	}
	// Simulated GPUs: no device-node check.
	sim := newHostChecks(nil, devices[:1], "", "")
	sim.now = h.now
	if c := sim.check(registered); c != nil {
		t.Errorf("simulated node without device nodes or CDI: %v", c)
	}
}
