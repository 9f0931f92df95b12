package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/testutil"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func simNode(t *testing.T, profile string) *sim.Backend {
	t.Helper()
	p, err := sim.Builtin(profile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestRunPluginReload(t *testing.T) {
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	kubelet, cdiDir, cfgFile := filepath.Join(dir, "dp"), filepath.Join(dir, "cdi"), filepath.Join(dir, "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(cfgFile, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	logs := &testutil.Buffer{}
	reload := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunPlugin(ctx, PluginOptions{
			ConfigFile: cfgFile, KubeletDir: kubelet, CDIDir: cdiDir, Backend: simNode(t, "dgxh100"),
			Reload: reload, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
	}()
	shared := filepath.Join(kubelet, deviceplugin.SocketName("nvidia.com/gpu.shared"))
	whole := filepath.Join(kubelet, deviceplugin.SocketName("nvidia.com/gpu"))
	eventually(t, "the shared resource's socket", func() bool { return exists(shared) })
	if !exists(filepath.Join(cdiDir, "gpuplane_nvidia.com-gpu.shared.yaml")) {
		t.Error("no CDI spec for the shared resource")
	}

	t.Run("invalid config keeps the last good one", func(t *testing.T) {
		write("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n")
		reload <- struct{}{}
		eventually(t, "the reload error", func() bool { return strings.Contains(logs.String(), "keeping the last good config") })
		if !strings.Contains(logs.String(), "replicas: must be >= 1 and at most 1000") {
			t.Errorf("log does not say why: %s", logs.String())
		}
		if !exists(shared) {
			t.Error("the running resource went away after a bad reload")
		}
	})
	t.Run("valid config replaces resources", func(t *testing.T) {
		write("version: v1\n")
		reload <- struct{}{}
		eventually(t, "the whole-GPU socket", func() bool { return exists(whole) })
		eventually(t, "the shared socket gone", func() bool { return !exists(shared) })
		if exists(filepath.Join(cdiDir, "gpuplane_nvidia.com-gpu.shared.yaml")) {
			t.Error("stale CDI spec left behind")
		}
	})
	t.Run("stop removes sockets", func(t *testing.T) {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if exists(whole) {
			t.Error("socket left after stop")
		}
	})
}

func TestRunPluginRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name, config, profile, want string
	}{
		{"MPS with MIG", "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", "dgxh100", "MPS cannot share MIG"},
		{"unknown field", "version: v1\nflags:\n  migStrategi: none\n", "dgxh100", `did you mean "migStrategy"`},
		{"unknown sharing resource", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpus\n      replicas: 2\n", "dgxh100", `unknown resource "nvidia.com/gpus"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "c.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			err := RunPlugin(context.Background(), PluginOptions{ConfigFile: cfg, KubeletDir: filepath.Join(dir, "dp"), Backend: simNode(t, tc.profile)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
