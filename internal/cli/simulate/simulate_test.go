package simulate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

func TestParseSeeds(t *testing.T) {
	tests := []struct {
		in   string
		want []uint64
		bad  bool
	}{
		{in: "1-3", want: []uint64{1, 2, 3}},
		{in: "1,5,7-8", want: []uint64{1, 5, 7, 8}},
		{in: "4", want: []uint64{4}},
		{in: "3-1", bad: true},
		{in: "x", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSeeds(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseSeeds(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseSeeds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

const trace = `
nodes:
- {name: n, count: 4, milliCPU: 32000, memoryMiB: 131072, gpus: 4, gpuModel: T4}
pods:
- {name: share, count: 10, gpuMilli: 300, milliCPU: 2000}
- {name: whole, count: 6, gpus: 1, milliCPU: 4000, createdAt: 3}
`

func runCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := NewCommand()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	cliutil.Apply(cmd)
	ran, err := cmd.ExecuteC()
	code := cliutil.Exit(err, ran, "gpuplane", &errb)
	return out.String(), errb.String(), code
}

func TestTraceSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
		bad  bool
	}{{5 * time.Minute, 300, false}, {0, 0, false}, {1500 * time.Millisecond, 0, true}, {-time.Second, 0, true}} {
		got, err := traceSeconds("mig-layout-dwell", tc.d)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("traceSeconds(%v) = %d, %v; want %d (error %v)", tc.d, got, err, tc.want, tc.bad)
		}
	}
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("json", func(t *testing.T) {
		out, _, code := runCmd(t, "--trace", path, "--policy", "fgd,bestfit", "--seeds", "1-2", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("got %d json objects, want 4:\n%s", len(lines), out)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"policy", "seed", "pods", "failedPods", "milliGpuAllocationRatio", "gpuAllocationRatio", "wallSeconds"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("json object lacks %q: %s", k, lines[0])
			}
		}
		if v := r["milliGpuAllocationRatio"].(float64); v <= 0 || v > 1 {
			t.Fatalf("milliGpuAllocationRatio = %g, want a fraction", v)
		}
	})
	t.Run("table and out dir", func(t *testing.T) {
		outDir := filepath.Join(dir, "out")
		out, stderr, code := runCmd(t, "--trace", path, "--policy", "fgd-packing,custom:fgd=1,bestfit=0.01", "--out", outDir)
		if code != 0 || !strings.Contains(out, "fgd-packing") || !strings.Contains(out, "custom:fgd=1,bestfit=0.01") {
			t.Fatalf("exit %d, table:\n%s", code, out)
		}
		if !strings.Contains(stderr, "runs done") {
			t.Fatalf("no plain progress lines on a non-terminal stderr: %q", stderr)
		}
		for _, f := range []string{"results.csv", "curve.csv", "plot.svg"} {
			if st, err := os.Stat(filepath.Join(outDir, f)); err != nil || st.Size() == 0 {
				t.Fatalf("%s not written: %v", f, err)
			}
		}
	})
	t.Run("event mode", func(t *testing.T) {
		outDir := filepath.Join(dir, "event")
		out, _, code := runCmd(t, "--trace", path, "--mode", "event", "--policy", "fgd,gpuplane", "--out", outDir)
		if code != 0 || !strings.Contains(out, "WAIT P50") || !strings.Contains(out, "JAIN") || strings.Contains(out, "/aware") {
			t.Fatalf("exit %d, table:\n%s", code, out)
		}
		for _, f := range []string{"results.csv", "queues.csv", "utilization.csv"} {
			if _, err := os.Stat(filepath.Join(outDir, f)); err != nil {
				t.Fatalf("%s not written: %v", f, err)
			}
		}
	})
	t.Run("topology", func(t *testing.T) {
		cluster := filepath.Join(dir, "cluster.yaml")
		if err := os.WriteFile(cluster, []byte("nodes:\n- {name: n, count: 16, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100}\npods: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		outDir := filepath.Join(dir, "topo")
		out, _, code := runCmd(t, "--trace", cluster, "--mode", "event", "--layout", "nodes-per-rack=4,racks-per-block=2",
			"--training", "40", "--training-sizes", "2:1,4:1", "--topology-policy", "blind,kueue-tas", "--out", outDir, "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("got %d json objects, want 2 (one per topology policy):\n%s", len(lines), out)
		}
		for i, want := range []string{"blind", "kueue-tas"} {
			var r struct {
				TopologyPolicy string `json:"topologyPolicy"`
				Topology       *struct {
					Gangs, Started int
					Preferred      struct{ Level string }
				} `json:"topology"`
			}
			if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
				t.Fatal(err)
			}
			if r.TopologyPolicy != want || r.Topology == nil || r.Topology.Gangs != 40 || r.Topology.Preferred.Level != "gpuplane.io/rack" {
				t.Fatalf("run %d: %s", i, lines[i])
			}
		}
		if st, err := os.Stat(filepath.Join(outDir, "topology.csv")); err != nil || st.Size() == 0 {
			t.Fatalf("topology.csv not written: %v", err)
		}
		for _, f := range []string{"results.csv", "queues.csv", "topology.csv"} {
			b, err := os.ReadFile(filepath.Join(outDir, f))
			if err != nil || !strings.Contains(string(b), ",kueue-tas") || !strings.Contains(string(b), ",blind") {
				t.Fatalf("%s does not tell the topology policies apart: %v\n%s", f, err, b)
			}
		}
		table, _, code := runCmd(t, "--trace", cluster, "--mode", "event", "--layout", "nodes-per-rack=4", "--training", "10", "--topology-policy", "aware,kueue-tas")
		if code != 0 || !strings.Contains(table, "PREFERRED IN ONE") || !strings.Contains(table, "fgd-packing/kueue-tas") {
			t.Fatalf("exit %d, table:\n%s", code, table)
		}
	})
	usage := []struct {
		name string
		args []string
	}{
		{"bad layout", []string{"--trace", path, "--layout", "racks=2"}},
		{"bad topology policy", []string{"--trace", path, "--mode", "event", "--topology-policy", "kai"}},
		{"topology policy in packing mode", []string{"--trace", path, "--topology-policy", "kueue-tas"}},
		{"bad training sizes", []string{"--trace", path, "--training", "3", "--training-sizes", "0:1"}},
		{"bad training load", []string{"--trace", path, "--training", "3", "--training-load", "0"}},
		{"no trace", nil},
		{"bad mode", []string{"--trace", path, "--mode", "x"}},
		{"bad policy", []string{"--trace", path, "--policy", "nope"}},
		{"bad seeds", []string{"--trace", path, "--seeds", "9-1"}},
		{"bad output", []string{"--trace", path, "-o", "xml"}},
		{"unknown flag", []string{"--nope"}},
		{"dwell under a second", []string{"--trace", path, "--mode", "event", "--mig-layout-dwell", "1500ms"}},
		{"negative delay", []string{"--trace", path, "--mode", "event", "--mig-layout-delay", "-5s"}},
	}
	for _, tc := range usage {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, code := runCmd(t, tc.args...); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
		})
	}
	t.Run("MIG layout flags in seconds, deprecated", func(t *testing.T) {
		_, stderr, code := runCmd(t, "--trace", path, "--mode", "event", "--mig-layout-dwell", "300", "--mig-demand-min-wait", "10s")
		if code != 0 || !strings.Contains(stderr, "Flag --mig-layout-dwell: a bare number of seconds is deprecated, give a duration such as 5m0s") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("missing trace file", func(t *testing.T) {
		if _, stderr, code := runCmd(t, "--trace", filepath.Join(dir, "nope.yaml")); code != 1 || !strings.Contains(stderr, "trace") {
			t.Fatalf("exit %d stderr %q, want 1 and a message about the trace", code, stderr)
		}
	})
}
