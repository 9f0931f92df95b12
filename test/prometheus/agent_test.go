package prometheus_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// lockedOutput collects the agent's output while the test may read it.
type lockedOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedOutput) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startAgentBinary builds cmd/gpuplane-agent and runs it on a simulated
// DGX H100 with no kubelet and no API server, serving metrics on a free
// loopback port, until the test ends. It returns the metrics address.
func startAgentBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := framework.BuildCommand(ctx, dir, "gpuplane-agent")
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin, "--simulate", "dgxh100", "--node-name", "prom-node", "--metrics-addr", addr,
		"--kubelet-dir", filepath.Join(dir, "kubelet"), "--cdi-dir", "", "--labels", "none",
		"--pod-resources-socket", filepath.Join(dir, "absent.sock"))
	out := &lockedOutput{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gpuplane-agent exited with %v after SIGTERM\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("gpuplane-agent did not stop within 30s of SIGTERM\n%s", out.String())
		}
	})
	return addr
}

// TestPrometheusScrapesTheAgent has a real Prometheus scrape the built
// agent (device plugin, health and metrics running, no kubelet) and
// queries it with the alert rules' PromQL.
func TestPrometheusScrapesTheAgent(t *testing.T) {
	tool(t, "prometheus")
	p := startPrometheus(t, startAgentBinary(t))
	p.eventually(t, "the agent is up", `up{job="gpuplane"} == 1`, count(1))
	p.eventually(t, "every GPU reports utilization", "DCGM_FI_DEV_GPU_UTIL", count(8))
	used := p.eventually(t, "memory used per GPU", "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)", count(8))
	for _, s := range used {
		if s.Value < 0 || s.Value > 1 {
			t.Errorf("GPU %s: memory used fraction %v, want 0..1", s.Labels["gpu"], s.Value)
		}
		if s.Labels["Hostname"] != "prom-node" {
			t.Errorf("GPU %s: Hostname %q, want prom-node", s.Labels["gpu"], s.Labels["Hostname"])
		}
	}
	p.eventually(t, "why pods are missing", `gpuplane_podresources_up{reason="socket-absent"} == 0`, count(1))
	p.eventually(t, "the health monitor runs", `gpuplane_health_monitor_up == 1`, count(1))
	p.eventually(t, "every GPU healthy", `gpuplane_device_healthy == 1`, count(8))
	p.eventually(t, "no gather errors", `gpuplane_scrape_collector_success == 0`, func(s []sample) error {
		if len(s) != 0 {
			return fmt.Errorf("failing collectors: %v", s)
		}
		return nil
	})
}
