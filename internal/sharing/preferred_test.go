package sharing

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// twoQuads is 8 GPUs in two NVLink quads (NV4 inside a quad), GPU i
// bridged to GPU i+4 by one NVLink, every other pair over SYS. GPUs listed
// in unreadable have no known links.
func twoQuads(unreadable ...int) *gpu.Topology {
	t := gpu.NewTopology(8)
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			if slices.Contains(unreadable, i) || slices.Contains(unreadable, j) {
				continue
			}
			l := gpu.Link{PCIe: gpu.PCIeSystem}
			switch {
			case i/4 == j/4:
				l = gpu.Link{NVLinks: 4, PCIe: gpu.PCIeNode}
			case j == i+4:
				l.NVLinks = 1
			}
			t.Set(i, j, l)
		}
	}
	return t
}

// nvswitch is a DGX H100: every pair joined by 18 NVLinks through
// NVSwitch, GPUs 0-3 on NUMA node 0 and 4-7 on node 1.
func nvswitch() *gpu.Topology {
	t := gpu.NewTopology(8)
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			l := gpu.Link{NVLinks: 18, PCIe: gpu.PCIeSystem}
			if i/4 == j/4 {
				l.PCIe = gpu.PCIeNode
			}
			t.Set(i, j, l)
		}
	}
	return t
}

func ids(prefix string, idx ...int) []string {
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = fmt.Sprintf("%s%04d", prefix, x)
	}
	return out
}

func TestPreferredWholeGPUs(t *testing.T) {
	rs, err := Build(load(t, "version: v1\n"), newNode(8).gpus)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	all := ids("GPU-", 0, 1, 2, 3, 4, 5, 6, 7)
	tests := []struct {
		name      string
		available []string
		must      []string
		size      int
		topo      *gpu.Topology
		want      []string
	}{
		{"one", all, nil, 1, twoQuads(), ids("GPU-", 0)},
		{"two in one quad", all, nil, 2, twoQuads(), ids("GPU-", 0, 1)},
		{"four is a quad", all, nil, 4, twoQuads(), ids("GPU-", 0, 1, 2, 3)},
		{"eight is all", all, nil, 8, twoQuads(), all},
		{"four with quad broken picks the other quad", ids("GPU-", 0, 2, 3, 4, 5, 6, 7), nil, 4, twoQuads(), ids("GPU-", 4, 5, 6, 7)},
		{"must include follows its NVLink", ids("GPU-", 0, 4, 5), ids("GPU-", 0), 2, twoQuads(), ids("GPU-", 0, 4)},
		{"unreadable GPU left out", all, nil, 4, twoQuads(1), ids("GPU-", 4, 5, 6, 7)},
		{"unreadable GPU used when nothing else is left", ids("GPU-", 1, 2), nil, 2, twoQuads(1), ids("GPU-", 2, 1)},
		{"no topology at all", ids("GPU-", 5, 3), nil, 1, nil, ids("GPU-", 3)},
		{"size smaller than must include", all, ids("GPU-", 6, 7), 1, twoQuads(), ids("GPU-", 6)},
		{"NVSwitch: four stay on one NUMA node", ids("GPU-", 2, 3, 4, 5, 6, 7), nil, 4, nvswitch(), ids("GPU-", 4, 5, 6, 7)},
		{"NVSwitch: two follow must include's NUMA node", ids("GPU-", 1, 2, 5, 6), ids("GPU-", 5), 2, nvswitch(), ids("GPU-", 5, 6)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Preferred(tc.available, tc.must, tc.size, tc.topo)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("unknown device", func(t *testing.T) {
		_, err := r.Preferred([]string{"GPU-9999"}, nil, 1, nil)
		if err == nil || !strings.Contains(err.Error(), "GPU-9999") {
			t.Fatalf("got %v, want an error naming GPU-9999", err)
		}
	})
}

// physical returns the GPU indexes behind a list of device IDs.
func physical(t *testing.T, r *Resource, list []string) []int {
	t.Helper()
	out := make([]int, len(list))
	for i, id := range list {
		d, ok := r.Device(id)
		if !ok {
			t.Fatalf("unknown device %s", id)
		}
		out[i] = d.GPUIndex
	}
	return out
}

func TestPreferredReplicas(t *testing.T) {
	const ts = "version: v1\nsharing:\n  allocationPolicy: %s\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
	// GPU 0 has 2 replicas in use, GPU 1 has 1, GPUs 2 and 3 none.
	inUse := map[string]bool{"GPU-0000::0": true, "GPU-0000::1": true, "GPU-0001::0": true}
	tests := []struct {
		name   string
		policy string
		must   []string
		size   int
		want   []int
	}{
		{"distributed one", "distributed", nil, 1, []int{2}},
		{"distributed two on distinct idle GPUs", "distributed", nil, 2, []int{2, 3}},
		{"distributed six: distinct first, then again", "distributed", nil, 6, []int{2, 3, 1, 0, 2, 3}},
		{"packed one fills the busiest GPU", "packed", nil, 1, []int{0}},
		{"packed two still on distinct GPUs", "packed", nil, 2, []int{0, 1}},
		{"must include counts as used", "distributed", []string{"GPU-0002::3"}, 3, []int{2, 3, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Build(load(t, fmt.Sprintf(ts, tc.policy)), newNode(4).gpus)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			var avail []string
			for _, d := range r.Devices {
				if !inUse[d.ID] {
					avail = append(avail, d.ID)
				}
			}
			got, err := r.Preferred(avail, tc.must, tc.size, twoQuads())
			if err != nil {
				t.Fatal(err)
			}
			if g := physical(t, r, got); !slices.Equal(g, tc.want) {
				t.Errorf("GPUs %v (devices %v), want GPUs %v", g, got, tc.want)
			}
			seen := map[string]bool{}
			for _, id := range got {
				if seen[id] || inUse[id] {
					t.Errorf("device %s chosen twice or while in use", id)
				}
				seen[id] = true
			}
		})
	}
}

func TestPreferredMIG(t *testing.T) {
	cfg := load(t, "version: v1\nflags:\n  migStrategy: mixed\n")
	rs, err := Build(cfg, newNode(2).mig(0, "1g.10gb", "1g.10gb", "1g.10gb").mig(1, "1g.10gb", "1g.10gb").gpus)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	var avail []string
	for _, d := range r.Devices {
		avail = append(avail, d.ID)
	}
	got, err := r.Preferred(avail, nil, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := physical(t, r, got); !slices.Equal(g, []int{0, 1}) {
		t.Errorf("two MIG devices on GPUs %v, want distinct GPUs [0 1]", g)
	}
}
