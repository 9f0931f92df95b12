package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"

	"github.com/gpuplane/gpuplane/internal/testutil"
)

// startAgent runs the agent in-process with args and returns the metrics
// address (nil when metrics are off), a function that stops it and returns
// its error, and its log.
func startAgent(t *testing.T, args []string) (net.Addr, func() error, *testutil.Buffer) {
	t.Helper()
	f := &runFlags{}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	f.add(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	ready := make(chan net.Addr, 1)
	f.metricsReady = func(a net.Addr) { ready <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := &testutil.Buffer{}
	go func() { done <- runAgent(ctx, f, log) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			return errors.New("the agent did not stop within 20s of its context ending")
		}
	})
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", log.String())
		}
	})
	if f.metricsAddr == "" {
		return nil, stop, log
	}
	select {
	case a := <-ready:
		return a, stop, log
	case err := <-done:
		t.Fatalf("the agent stopped before serving metrics: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not serve metrics within 20s")
	}
	return nil, stop, log
}

// scrape reads /metrics at addr and parses it.
func scrape(t *testing.T, addr net.Addr) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping the agent: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping the agent: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func gauge(fams map[string]*dto.MetricFamily, name string) (float64, string, bool) {
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) == 0 {
		return 0, "", false
	}
	m := f.GetMetric()[0]
	return m.GetGauge().GetValue(), label(m, "reason"), true
}

// TestAgentServesMetricsWithoutKubelet starts the whole agent on a
// simulated DGX H100 with no kubelet and checks that it is a working
// exporter: eight GPUs' DCGM series, and gpuplane_podresources_up saying
// why no pod labels are there.
func TestAgentServesMetricsWithoutKubelet(t *testing.T) {
	dir := t.TempDir()
	procfs := filepath.Join(dir, "proc")
	if err := os.Mkdir(procfs, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		extra      []string
		podsReason string
		labelsLog  string
	}{
		{
			"socket absent, no API server", []string{"--pod-resources-socket", filepath.Join(dir, "absent.sock")}, "socket-absent",
			"GPU feature labels are off: the API server is not configured",
		},
		{"attribution and labels off", []string{"--pod-resources-socket", "", "--labels", "none"}, "disabled", "GPU feature labels are off (--labels=none)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			args := append([]string{
				"--simulate", "dgxh100", "--node-name", "metrics-node", "--kubelet-dir", filepath.Join(dir, "kubelet"),
				"--cdi-dir", "", "--metrics-addr", "127.0.0.1:0", "--procfs", procfs,
			}, tc.extra...)
			addr, stop, log := startAgent(t, args)
			if !strings.Contains(log.String(), tc.labelsLog) {
				t.Errorf("the log does not say %q:\n%s", tc.labelsLog, log.String())
			}
			fams := scrape(t, addr)
			util := fams["DCGM_FI_DEV_GPU_UTIL"]
			if util == nil {
				t.Fatal("no DCGM_FI_DEV_GPU_UTIL in /metrics")
			}
			gpus := map[string]bool{}
			for _, m := range util.GetMetric() {
				gpus[label(m, "gpu")] = true
				if got := label(m, "Hostname"); got != "metrics-node" {
					t.Errorf("Hostname %q, want metrics-node", got)
				}
				if got := label(m, "modelName"); got != "NVIDIA H100 80GB HBM3" {
					t.Errorf("modelName %q, want NVIDIA H100 80GB HBM3", got)
				}
				if pod := label(m, "pod"); pod != "" {
					t.Errorf("pod label %q without a kubelet", pod)
				}
			}
			if len(gpus) != 8 {
				t.Errorf("DCGM_FI_DEV_GPU_UTIL for GPUs %v, want 8 GPUs", gpus)
			}
			for _, name := range []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"} {
				if n := len(fams[name].GetMetric()); n != 8 {
					t.Errorf("%s: %d series, want 8", name, n)
				}
			}
			// No kubelet: alive, but not ready, saying why.
			if code, body := get(t, addr.String(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "registration socket") {
				t.Errorf("/readyz without a kubelet: %d %q, want 503 naming the kubelet's socket", code, body)
			}
			if code, body := get(t, addr.String(), "/healthz"); code != http.StatusOK {
				t.Errorf("/healthz: %d %q, want 200", code, body)
			}
			if v, reason, ok := gauge(fams, "gpuplane_podresources_up"); !ok || v != 0 || reason != tc.podsReason {
				t.Errorf("gpuplane_podresources_up = %v{reason=%q} (present %v), want 0{reason=%q}", v, reason, ok, tc.podsReason)
			}
			// The device plugin's health monitor reaches the exporter once
			// the plugin has started it.
			pollUntil(t, 20*time.Second, "gpuplane_health_monitor_up 1", func() (bool, string) {
				fams = scrape(t, addr)
				v, reason, ok := gauge(fams, "gpuplane_health_monitor_up")
				return v == 1, fmt.Sprintf("gpuplane_health_monitor_up = %v{reason=%q} (present %v)", v, reason, ok)
			})
			healthy := 0
			for _, m := range fams["gpuplane_device_healthy"].GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					healthy++
				}
			}
			if healthy != 8 {
				t.Errorf("gpuplane_device_healthy: %d healthy GPUs, want 8", healthy)
			}
			if err := stop(); err != nil {
				t.Errorf("the agent stopped with %v, want a clean stop", err)
			}
		})
	}
}

// TestAgentLabelsFollowConfigReload writes labels to a features file and
// checks that a SIGHUP reload of the device plugin config reaches them.
func TestAgentLabelsFollowConfigReload(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	features := filepath.Join(dir, "features.d", "gpuplane")
	const shared = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
	const whole = "version: v1\n"
	if err := os.WriteFile(cfgPath, []byte(shared), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stop, _ := startAgent(t, []string{
		"--simulate", "dgxh100", "--node-name", "labels-node", "--kubelet-dir", filepath.Join(dir, "kubelet"),
		"--cdi-dir", "", "--metrics-addr", "", "--labels", "file", "--labels-file", features, "--labels-interval", "0",
		"--config", cfgPath,
	})
	steps := []struct {
		name   string
		config string
		want   []string
	}{
		{"time-sliced at start", "", []string{"nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.replicas=4", "nvidia.com/gpu.sharing-strategy=time-slicing"}},
		{"sharing removed by reload", whole, []string{"nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas=1", "nvidia.com/gpu.sharing-strategy=none"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.config != "" {
				if err := os.WriteFile(cfgPath, []byte(st.config), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			pollUntil(t, 20*time.Second, "the labels in "+features, func() (bool, string) {
				data, err := os.ReadFile(features)
				return err == nil && containsLines(string(data), st.want), fmt.Sprintf("features file:\n%s\nwant lines %v", data, st.want)
			})
		})
	}
	if err := stop(); err != nil {
		t.Errorf("the agent stopped with %v, want a clean stop", err)
	}
}

// pollUntil checks cond every 20ms until it holds, and fails the test
// with cond's last explanation when timeout passes first.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("waiting %v for %s: %s", timeout, what, why)
		case <-tick.C:
		}
	}
}

func containsLines(text string, want []string) bool {
	lines := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		lines[l] = true
	}
	for _, w := range want {
		if !lines[w] {
			return false
		}
	}
	return true
}

// TestAgentFlags checks --help and that bad flag values are usage errors
// (exit 2) that name the flag, before anything starts.
func TestAgentFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"help lists the flags", []string{"--help"}, 0, []string{"--metrics-addr", "--pod-resources-socket", "--procfs", "--labels ", "--kubeconfig", "--labels-interval", "--labels-file", "--node-name"}},
		{"unknown labels destination", []string{"--simulate", "dgxh100", "--labels", "configmap"}, 2, []string{"--labels", "node, file or none"}},
		{"negative labels interval", []string{"--simulate", "dgxh100", "--labels-interval", "-1s"}, 2, []string{"--labels-interval", "negative"}},
		{"labels interval not a duration", []string{"--labels-interval", "often"}, 2, []string{"labels-interval"}},
		{"metrics address without a port", []string{"--simulate", "dgxh100", "--metrics-addr", "localhost"}, 2, []string{"--metrics-addr", "host:port"}},
		{"metrics port out of range", []string{"--simulate", "dgxh100", "--metrics-addr", "127.0.0.1:99999"}, 2, []string{"--metrics-addr", "99999"}},
		{"labels on the node without an API server", []string{"--simulate", "dgxh100", "--labels", "node"}, 2, []string{"--labels=node", "--kubeconfig"}},
		{"procfs missing", []string{"--simulate", "dgxh100", "--procfs", "/nonexistent/proc"}, 2, []string{"--procfs", "/nonexistent/proc"}},
		{"unknown simulated profile", []string{"--simulate", "dgx-nonesuch", "--labels", "none", "--metrics-addr", ""}, 2, []string{"--simulate"}},
		{"MIG ConfigMap without a namespace", []string{"--simulate", "dgxh100", "--mig-config-map", "mig-configs"}, 2, []string{"--mig-config-map", "NAMESPACE/NAME"}},
		{"MIG eviction timeout of zero", []string{"--simulate", "dgxh100", "--mig-config-map", "ns/cm", "--mig-eviction-timeout", "0s"}, 2, []string{"--mig-eviction-timeout"}},
		{"declarative MIG without an API server", []string{"--simulate", "dgxh100", "--labels", "none", "--metrics-addr", "", "--mig-config-map", "ns/cm"}, 2, []string{"--mig-config-map needs the API server"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			var stdout, stderr bytes.Buffer
			code := Main(tc.args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tc.code, out)
			}
			for _, c := range tc.contains {
				if !strings.Contains(out, c) {
					t.Errorf("output lacks %q:\n%s", c, out)
				}
			}
		})
	}
}

// TestRunPartsStopsAll checks that one failing part stops the others and
// is named in the error, and that a stop by the context is clean.
func TestRunPartsStopsAll(t *testing.T) {
	boom := errors.New("port taken")
	waitCtx := func(ctx context.Context) error { <-ctx.Done(); return nil }
	tests := []struct {
		name    string
		parts   []part
		cancel  bool
		wantErr string
	}{
		{"failing part stops the others", []part{{"metrics", func(context.Context) error { return boom }}, {"labels", waitCtx}}, false, "metrics: port taken"},
		{"part ending early is an error", []part{{"labels", func(context.Context) error { return nil }}, {"device plugin", waitCtx}}, false, "labels: stopped unexpectedly"},
		{"context end is a clean stop", []part{{"labels", waitCtx}, {"device plugin", waitCtx}}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			err := runParts(ctx, quietLogger(), tc.parts)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestAgentStopsWhenAPartCannotRun occupies the metrics port: the agent
// must stop its other parts and return an error naming the part and the
// flag to change.
func TestAgentStopsWhenAPartCannotRun(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	dir := t.TempDir()
	f := &runFlags{}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	f.add(fs)
	if err := fs.Parse([]string{"--simulate", "dgxh100", "--kubelet-dir", filepath.Join(dir, "kubelet"), "--cdi-dir", "",
		"--labels", "none", "--metrics-addr", ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = runAgent(ctx, f, &testutil.Buffer{})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("runAgent = %v (context %v), want an error before the deadline", err, ctx.Err())
	}
	for _, want := range []string{"metrics", "--metrics-addr"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// get fetches path from the agent's metrics address.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
