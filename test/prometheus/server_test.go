package prometheus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startExporter serves the exporter on a free loopback port until the test
// ends and returns its address.
func startExporter(t *testing.T, e *metrics.Exporter) string {
	t.Helper()
	h, err := metrics.NewHandler(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- metrics.Serve(ctx, "127.0.0.1:0", h, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { addrc <- a.String() })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
	select {
	case a := <-addrc:
		return a
	case err := <-done:
		t.Fatalf("metrics server did not start: %v", err)
	}
	return ""
}

// prometheusServer is a Prometheus started by a test.
type prometheusServer struct {
	base string
}

// startPrometheus starts Debian's prometheus scraping target every second,
// with its own config and data directory, and stops it when the test ends.
func startPrometheus(t *testing.T, target string) *prometheusServer {
	t.Helper()
	return startPrometheusJob(t, fmt.Sprintf("    static_configs:\n      - targets: [%q]\n", target))
}

// startPrometheusJob is startPrometheus with the rest of the gpuplane
// scrape job's config (indented under it): targets, scheme, TLS, auth.
func startPrometheusJob(t *testing.T, job string) *prometheusServer {
	t.Helper()
	return startPrometheusOn(t, job, "")
}

// startPrometheusOn is startPrometheusJob over a data directory the test
// filled (a fresh one when data is ""), with more command-line flags.
func startPrometheusOn(t *testing.T, job, data string, flags ...string) *prometheusServer {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	if data == "" {
		data = filepath.Join(dir, "data")
	}
	config := `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpuplane
` + job
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + data,
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, flags...)
	cmd := exec.Command(bin, args...) //nolint:gosec // the binary is the one found on PATH for this test
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	// exited is closed once the process is reaped; waitErr is then set.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &prometheusServer{base: "http://" + addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logFile.Name())
			t.Fatalf("prometheus exited early: %v\n%s", waitErr, b)
		default:
		}
		resp, err := http.Get(p.base + "/-/ready") //nolint:noctx // short-lived readiness probe
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready within 60s (last error %v)", addr, err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// sample is one element of an instant-vector answer.
type sample struct {
	Labels map[string]string
	Value  float64
}

// query runs an instant query.
func (p *prometheusServer) query(t *testing.T, q string) []sample {
	t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q)) //nolint:noctx // test query
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("query %q: decoding: %v", q, err)
	}
	if body.Status != "success" || body.Data.ResultType != "vector" {
		t.Fatalf("query %q: status %s, type %s: %s", q, body.Status, body.Data.ResultType, body.Error)
	}
	out := make([]sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %q: value %v: %v", q, r.Value[1], err)
		}
		out = append(out, sample{Labels: r.Metric, Value: v})
	}
	return out
}

// eventually polls q until check accepts its answer or the deadline passes.
func (p *prometheusServer) eventually(t *testing.T, what, q string, check func([]sample) error) []sample {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := p.query(t, q)
		err := check(got)
		if err == nil {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s: %v (last answer %v)", what, q, err, got)
		}
		time.Sleep(200 * time.Millisecond) // poll interval
	}
}

func count(n int) func([]sample) error {
	return func(s []sample) error {
		if len(s) != n {
			return fmt.Errorf("%d series, want %d", len(s), n)
		}
		return nil
	}
}

// health is a health monitor that marks one GPU unhealthy.
type health struct{ uuid string }

func (h *health) HealthState() metrics.HealthState {
	return metrics.HealthState{Running: true, Devices: []metrics.DeviceHealth{{UUID: h.uuid, Reason: "xid-48"}}}
}

// dashboardQueries returns every PromQL expression of the Grafana
// dashboard, with its variables set to match everything.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("parsing the dashboard: %v", err)
	}
	out := map[string]string{}
	vars := strings.NewReplacer("$node", ".*", "$namespace", ".*")
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("%s/%d", p.Title, i)] = vars.Replace(tg.Expr)
		}
	}
	if len(out) < 20 {
		t.Fatalf("the dashboard has only %d queries", len(out))
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestPrometheusScrapesSimulatedNode(t *testing.T) {
	tool(t, "prometheus")
	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	n.TimeSliced(t, "nvidia.com/gpu", 10)
	n.WriteCheckpoint(t)
	n.Clock.Advance(time.Minute)
	e, err := metrics.NewExporter(metrics.Options{
		GPUs:           n.Backend,
		PodResources:   metrics.NewSocketPodResources(metricstest.ServePodResources(t, n.Response())),
		ProcRoot:       n.ProcRoot,
		CheckpointPath: n.CheckpointPath,
		Health:         &health{uuid: n.Devices(t)[4].UUID},
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	target := startExporter(t, e)
	prom := startPrometheus(t, target)
	prom.eventually(t, "first scrape", `up{job="gpuplane"} == 1`, count(1))
	prom.eventually(t, "GPU series", `DCGM_FI_DEV_GPU_UTIL`, count(8))

	// What the simulated node says, GPU by GPU.
	devs := n.Devices(t)
	want := map[string]gpu.Sample{}
	for _, d := range devs {
		var s gpu.Sample
		if err := n.Backend.Sample(context.Background(), d.Index, &s); err != nil {
			t.Fatal(err)
		}
		want[d.UUID] = s
	}

	t.Run("per GPU", func(t *testing.T) {
		tests := []struct {
			name, query string
			want        func(s gpu.Sample) float64
		}{
			{name: "memory ratio", query: `DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)`,
				want: func(s gpu.Sample) float64 { return float64(s.FBUsedMiB) / float64(s.FBUsedMiB+s.FBFreeMiB) }},
			{name: "utilization", query: `DCGM_FI_DEV_GPU_UTIL`, want: func(s gpu.Sample) float64 { return float64(s.GPUUtil) }},
			{name: "utilization over an hour", query: `avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h])`, want: func(s gpu.Sample) float64 { return float64(s.GPUUtil) }},
			{name: "temperature", query: `DCGM_FI_DEV_GPU_TEMP`, want: func(s gpu.Sample) float64 { return float64(s.GPUTempC) }},
			{name: "power", query: `DCGM_FI_DEV_POWER_USAGE`, want: func(s gpu.Sample) float64 { return float64(s.PowerMilliW) / 1000 }},
			{name: "pods' memory adds up to the GPU's", query: `sum by (UUID) (gpuplane_pod_gpu_memory_used_bytes) / 1048576`,
				want: func(s gpu.Sample) float64 { return float64(s.FBUsedMiB) }},
			{name: "pods' utilization adds up to the GPU's", query: `sum by (UUID) (gpuplane_pod_gpu_utilization_ratio) * 100`,
				want: func(s gpu.Sample) float64 { return float64(s.GPUUtil) }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := prom.query(t, tt.query)
				if len(got) != len(devs) {
					t.Fatalf("%d series, want %d", len(got), len(devs))
				}
				for _, s := range got {
					w, ok := want[s.Labels["UUID"]]
					if !ok {
						t.Fatalf("series for unknown GPU %v", s.Labels)
					}
					if !near(s.Value, tt.want(w)) {
						t.Errorf("GPU %s: %s = %v, want %v", s.Labels["gpu"], tt.query, s.Value, tt.want(w))
					}
				}
			})
		}
	})

	t.Run("per pod", func(t *testing.T) {
		type key struct{ ns, pod string }
		mem := map[key]float64{}
		for _, s := range prom.query(t, `sum by (namespace, pod) (gpuplane_pod_gpu_memory_used_bytes)`) {
			mem[key{s.Labels["namespace"], s.Labels["pod"]}] = s.Value
		}
		util := map[key]float64{}
		for _, s := range prom.query(t, `gpuplane_pod_gpu_utilization_ratio`) {
			util[key{s.Labels["namespace"], s.Labels["pod"]}] = s.Value
		}
		if len(mem) != len(n.Pods) || len(util) != len(n.Pods) {
			t.Fatalf("%d pods with memory, %d with utilization, want %d", len(mem), len(util), len(n.Pods))
		}
		for _, p := range n.Pods {
			k := key{p.Namespace, p.Name}
			if w := float64(p.MemMiB << 20); mem[k] != w {
				t.Errorf("pod %s/%s memory = %v, want %v", p.Namespace, p.Name, mem[k], w)
			}
			if w := float64(p.Util) / 100; !near(util[k], w) {
				t.Errorf("pod %s/%s utilization = %v, want %v", p.Namespace, p.Name, util[k], w)
			}
		}
		// Per namespace, as the dashboard sums it.
		for _, s := range prom.query(t, `sum by (namespace) (gpuplane_pod_gpu_memory_used_bytes)`) {
			var w float64
			for _, p := range n.Pods {
				if p.Namespace == s.Labels["namespace"] {
					w += float64(p.MemMiB << 20)
				}
			}
			if s.Value != w {
				t.Errorf("namespace %s memory = %v, want %v", s.Labels["namespace"], s.Value, w)
			}
		}
		prom.eventually(t, "PodResources answered", `gpuplane_podresources_up == 1`, count(1))
	})

	t.Run("XID alert expression", func(t *testing.T) {
		if err := n.Backend.InjectXID(4, 48); err != nil {
			t.Fatal(err)
		}
		got := prom.eventually(t, "XID seen", `increase(DCGM_FI_DEV_XID_ERRORS[1h]) > 0`, count(1))
		if got[0].Labels["gpu"] != "4" {
			t.Errorf("XID alert expression fires for %v, want GPU 4", got[0].Labels)
		}
		prom.eventually(t, "XID count", `gpuplane_xid_errors_total{gpu="4"} == 1`, count(1))
	})

	t.Run("a lost GPU's series go away, the scrape goes on", func(t *testing.T) {
		if err := n.Backend.LoseGPU(7); err != nil {
			t.Fatal(err)
		}
		prom.eventually(t, "lost GPU gone", `DCGM_FI_DEV_GPU_UTIL`, count(7))
		prom.eventually(t, "lost GPU reported", `gpuplane_device_telemetry_up{reason="gpu-lost"} == 0`, func(s []sample) error {
			if len(s) != 1 || s[0].Labels["gpu"] != "7" {
				return errors.New("want GPU 7 reported lost")
			}
			return nil
		})
		if got := prom.query(t, `up{job="gpuplane"}`); len(got) != 1 || got[0].Value != 1 {
			t.Errorf("up = %v, want the scrape to keep succeeding", got)
		}
	})

	// Every dashboard panel shows data from a real scrape of the node.
	t.Run("dashboard", func(t *testing.T) {
		for name, q := range dashboardQueries(t) {
			t.Run(name, func(t *testing.T) {
				if got := prom.query(t, q); len(got) == 0 {
					t.Errorf("%s: no data", q)
				}
			})
		}
	})
}
