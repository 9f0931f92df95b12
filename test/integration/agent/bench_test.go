package agent_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var servingMetrics = regexp.MustCompile(`msg="serving metrics".* addr=(\S+)`)

// BenchmarkAgentRSSOver10000Scrapes measures the resident memory of the
// built gpuplane-agent process running all its parts on a simulated DGX
// H100 with ten time-sliced replicas per GPU: the device plugin (waiting
// for a kubelet), feature labels on its Node in the real API server every
// second, and metrics with 80 time-sliced pods listed by a PodResources
// gRPC server and the kubelet's device checkpoint. It scrapes /metrics 200
// times to warm up, reads VmRSS of the agent's process, scrapes 10,000
// more times and reads VmRSS again. Target: under 60 MiB, flat.
func BenchmarkAgentRSSOver10000Scrapes(b *testing.B) {
	const node = "gpu-node-1"
	if _, err := env.Client.CoreV1().Nodes().Create(b.Context(), framework.UnmanagedGPUNode(node).Obj(), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	// The pods, their cgroups and the checkpoint, for the UUIDs the agent's
	// own simulated node (same profile and node name) has.
	n := metricstest.NewNode(b, "dgxh100", node)
	n.TimeSliced(b, "nvidia.com/gpu", 10)
	n.WriteCheckpoint(b)
	socket := metricstest.ServePodResources(b, n.Response())
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	const shared = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"
	if err := os.WriteFile(cfg, []byte(shared), 0o600); err != nil {
		b.Fatal(err)
	}
	p := startAgentProcess(b, "--simulate", "dgxh100", "--node-name", node, "--config", cfg,
		"--kubeconfig", env.ControlPlane.Kubeconfig(), "--labels-interval", "1s",
		"--kubelet-dir", filepath.Dir(n.CheckpointPath), "--cdi-dir", b.TempDir(),
		"--pod-resources-socket", socket, "--procfs", n.ProcRoot, "--metrics-addr", "127.0.0.1:0")
	var addr string
	framework.Eventually(b, 60*time.Second, "the agent's metrics address", func(context.Context) (bool, error) {
		m := servingMetrics.FindStringSubmatch(p.out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil, nil
	})
	url := "http://" + addr + "/metrics"
	client := &http.Client{Timeout: 30 * time.Second}
	body := scrapeAgent(b, client, url)
	if !strings.Contains(body, `pod="train-0-0"`) {
		b.Fatalf("the agent does not attribute GPUs to the 80 pods; /metrics:\n%.2000s", body)
	}
	framework.Eventually(b, 60*time.Second, "labels on "+node, func(ctx context.Context) (bool, error) {
		got, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && got.Labels["nvidia.com/gpu.replicas"] == "10", err
	})
	pid := p.cmd.Process.Pid
	for b.Loop() {
		for range 200 {
			scrapeAgent(b, client, url)
		}
		start := vmKiB(b, pid, "VmRSS")
		for range 10_000 {
			scrapeAgent(b, client, url)
		}
		end := vmKiB(b, pid, "VmRSS")
		b.ReportMetric(float64(start)/1024, "rss-start-MiB")
		b.ReportMetric(float64(end)/1024, "rss-end-MiB")
		b.ReportMetric(float64(end-start)/1024, "rss-growth-MiB")
		b.ReportMetric(float64(vmKiB(b, pid, "VmHWM"))/1024, "rss-peak-MiB")
		// Anonymous memory (heap, stacks) as against pages of the binary.
		b.ReportMetric(float64(vmKiB(b, pid, "RssAnon"))/1024, "rss-anon-end-MiB")
	}
	if err := p.stop(); err != nil {
		b.Errorf("agent exit after SIGTERM: %v", err)
	}
}

func scrapeAgent(b *testing.B, client *http.Client, url string) string {
	b.Helper()
	resp, err := client.Get(url)
	if err != nil {
		b.Fatalf("scraping the agent: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("scraping the agent: %s, %v", resp.Status, err)
	}
	return string(data)
}

// vmKiB reads a field (VmRSS, VmHWM, RssAnon) of /proc/<pid>/status in KiB.
func vmKiB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	v, err := framework.ProcStatusKiB(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return v
}
