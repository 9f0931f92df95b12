package docgen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/docgen/cobradoc"
)

var update = flag.Bool("update", false, "rewrite docs/reference (make docs)")

// TestReferenceIsCurrent fails when a committed page of docs/reference
// differs from what Generate writes, or when docs/reference/cli holds a
// page of a command that is gone; with -update (make docs) it rewrites
// them.
func TestReferenceIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := cobradoc.Committed(root, "gpuplane")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		for _, rel := range committed {
			if _, keep := pages[rel]; !keep {
				if err := os.Remove(filepath.Join(root, rel)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, rel := range sortedKeys(pages) {
		path := filepath.Join(root, rel)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, pages[rel], 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, pages[rel]) {
			t.Errorf("%s is stale: run make docs (or make generate) and commit it", rel)
		}
	}
	for _, rel := range committed {
		if _, ok := pages[rel]; !ok && !*update {
			t.Errorf("%s documents no command: run make docs", rel)
		}
	}
}

// TestPagesNameWhatTheyDocument spot-checks each page for what it must
// hold, so that a generator that writes empty tables fails.
func TestPagesNameWhatTheyDocument(t *testing.T) {
	pages, err := Generate(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string][]string{
		Dir + "/cli/gpuplane_doctor.md": {"gpuplane doctor", "--kubeconfig"},
		Dir + "/crds.md":                {"## Queue", "`spec.resources[].weight`", "at least 1", "## Topology"},
		Dir + "/labels-annotations.md":  {"`gpuplane.io/gpus-held`", "`nvidia.com/gpu.product`", "`gpu.gpuplane.io/unhealthy` | taint", "`kueue.x-k8s.io/queue-name`", "`nvidia.com/gpu.family` | `hopper`"},
		Dir + "/conditions-events.md":   {"[`GPUReady`](../troubleshooting.md#gpuready)", "[`MIGConfigEvictionBlocked`](../troubleshooting.md#evictionblocked)"},
		Dir + "/metrics.md":             {"`DCGM_FI_DEV_GPU_UTIL` | gauge", "the same", "`gpuplane_gpu_quarantine_state`", "`gpuplane_health_critical_events_total` | counter", "`gpuplane_scheduler_queue_fair_share` | gauge", "`gpuplane_scheduler_leader` | gauge", "`gpuplane_scheduler_binds_total` | counter", "histogram"},
	} {
		page, ok := pages[rel]
		if !ok {
			t.Errorf("%s is not generated", rel)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(page), w) {
				t.Errorf("%s lacks %q", rel, w)
			}
		}
	}
}
