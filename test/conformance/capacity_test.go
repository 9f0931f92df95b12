package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// TestCapacity checks capacity and allocatable as the kubelet computes them
// for every sharing mode and MIG strategy.
func TestCapacity(t *testing.T) {
	needNamespace(t)
	const gpus = 8 // a DGX H100
	type want map[string]int64
	tests := []struct {
		name    string
		config  func(t *testing.T) string
		prepare func(t *testing.T, b *sim.Backend) want
	}{
		{"whole GPUs", static("version: v1\n"), func(*testing.T, *sim.Backend) want { return want{"nvidia.com/gpu": gpus} }},
		{"seed time-slicing ConfigMap", seed("seed-time-slicing-configmap.yaml"), func(*testing.T, *sim.Backend) want {
			return want{"nvidia.com/gpu": gpus * 4}
		}},
		{"time-slicing renamed", static("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"), func(*testing.T, *sim.Backend) want {
			return want{"nvidia.com/gpu.shared": gpus * 10, "nvidia.com/gpu": 0}
		}},
		{"MPS", static("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"), func(*testing.T, *sim.Backend) want {
			return want{"nvidia.com/gpu": gpus * 2}
		}},
		{"per-GPU replicas", static("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      devices: [0, 1]\n      replicas: 2\n    - name: nvidia.com/gpu\n      devices: [2]\n      replicas: 3\n"), func(*testing.T, *sim.Backend) want {
			return want{"nvidia.com/gpu": 2*2 + 3 + (gpus - 3)}
		}},
		{"MIG none ignores MIG devices", static("version: v1\n"), func(t *testing.T, b *sim.Backend) want {
			partition(t, b, 0, 1, 7)
			return want{"nvidia.com/gpu": gpus}
		}},
		{"seed MIG ConfigMap (single)", seed("seed-mig-configmap.yaml"), func(t *testing.T, b *sim.Backend) want {
			for i := range gpus {
				partition(t, b, i, 1, 7)
			}
			return want{"nvidia.com/gpu": gpus * 7}
		}},
		{"MIG mixed", static("version: v1\nflags:\n  migStrategy: mixed\n"), func(t *testing.T, b *sim.Backend) want {
			small := partition(t, b, 0, 1, 7)
			big := partition(t, b, 1, 7, 1)
			return want{"nvidia.com/gpu": gpus - 2, "nvidia.com/mig-" + small: 7, "nvidia.com/mig-" + big: 1}
		}},
		{"MIG mixed with time-sliced MIG devices", func(t *testing.T) string {
			return "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n"
		}, func(t *testing.T, b *sim.Backend) want {
			small := partition(t, b, 0, 1, 7)
			if small != "1g.10gb" {
				t.Skipf("the H100's 1-slice profile is %s here", small)
			}
			return want{"nvidia.com/gpu": gpus - 1, "nvidia.com/mig-" + small: 14}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := startKubelet(t)
			var expect want
			startAgent(t, "dgxh100", tc.config(t), func(b *sim.Backend) { expect = tc.prepare(t, b) })
			for name, n := range expect {
				k.waitCounts(5*time.Second, name, n, n)
			}
		})
	}
}

func static(s string) func(*testing.T) string { return func(*testing.T) string { return s } }

func seed(file string) func(*testing.T) string {
	return func(t *testing.T) string { return seedConfig(t, file) }
}

// TestRefusedLayouts checks that the agent refuses, with one clear message,
// a config that contradicts the node's GPUs.
func TestRefusedLayouts(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		prepare func(t *testing.T, b *sim.Backend)
		want    string
	}{
		{"single over different MIG devices", "version: v1\nflags:\n  migStrategy: single\n", func(t *testing.T, b *sim.Backend) {
			partition(t, b, 0, 1, 7)
			for i := 1; i < 8; i++ {
				partition(t, b, i, 7, 1)
			}
		}, "identical MIG devices"},
		{"MPS with MIG", "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", nil, "MPS cannot share MIG"},
		{"replicas 0", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n", nil, "must be >= 1 and at most 1000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tryAgent(t, "dgxh100", tc.config, func(b *sim.Backend) {
				if tc.prepare != nil {
					tc.prepare(t, b)
				}
			}, 10*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal mentioning %q", err, tc.want)
			}
		})
	}
}
