package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestInventoryJSONOfSimulatedH100(t *testing.T) {
	code, out, errOut := run(t, "inventory", "--simulate", "dgxh100", "--node-name", "node-a", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var inv struct {
		Devices  []gpu.Device `json:"devices"`
		Topology struct {
			Matrix [][]string `json:"matrix"`
		} `json:"topology"`
	}
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(inv.Devices) != 8 {
		t.Fatalf("%d GPUs, want 8", len(inv.Devices))
	}
	uuids := map[string]bool{}
	for _, d := range inv.Devices {
		if !strings.Contains(d.Name, "H100") || d.MemoryMiB != 81920 {
			t.Errorf("GPU %d = %s with %d MiB, want an H100 with 80 GiB", d.Index, d.Name, d.MemoryMiB)
		}
		uuids[d.UUID] = true
	}
	if len(uuids) != 8 {
		t.Errorf("%d distinct UUIDs, want 8", len(uuids))
	}
	for i, row := range inv.Topology.Matrix {
		for j, cell := range row {
			if i != j && !strings.HasPrefix(cell, "NV") {
				t.Errorf("GPU%d-GPU%d = %s, want NVLink", i, j, cell)
			}
		}
	}
	// The same node name gives the same UUIDs: the kubelet's checkpoint of
	// device IDs stays valid across agent restarts.
	_, again, _ := run(t, "inventory", "--simulate", "dgxh100", "--node-name", "node-a", "-o", "json")
	if again != out {
		t.Error("a second run with the same node name reports a different inventory")
	}
}

func TestInventoryTable(t *testing.T) {
	code, out, errOut := run(t, "inventory", "--simulate", "dgxa100", "--node-name", "n")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"GPU7", "NV12", "A100", "Legend:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestInventoryErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("gpus:\n  - model: T4\n    memroy: 16Gi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown profile", []string{"--simulate", "dgxz900"}, 2, "dgxh100"},
		{"malformed profile file", []string{"--simulate", bad}, 1, "memroy"},
		{"unknown output", []string{"--simulate", "dgxh100", "-o", "xml"}, 2, "json"},
		{"unknown flag", []string{"--simulat", "dgxh100"}, 2, "unknown flag"},
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		tests = append(tests, struct {
			name string
			args []string
			code int
			want string
		}{"no driver", nil, 1, "libnvidia-ml.so.1"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, append([]string{"inventory"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, errOut, tt.code, tt.want)
			}
			if strings.Contains(errOut, "goroutine ") {
				t.Errorf("stderr holds a stack trace:\n%s", errOut)
			}
		})
	}
}
