package sharing

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// node is a fluent builder of a node's GPUs for tests.
type node struct{ gpus []gpu.Device }

func newNode(n int) *node {
	nd := &node{}
	for i := range n {
		nd.gpus = append(nd.gpus, gpu.Device{
			Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%04d", i), Name: "NVIDIA H100 80GB HBM3",
			MemoryMiB: 81559, NUMANode: i / 4, MIG: gpu.MIGMode{Capable: true},
		})
	}
	return nd
}

// reserve says the driver keeps mib of GPU i's memory.
func (n *node) reserve(i int, mib uint64) *node {
	n.gpus[i].ReservedMiB = mib
	return n
}

// mig turns MIG on for GPU i with one MIG device per profile given.
func (n *node) mig(i int, profiles ...string) *node {
	g := &n.gpus[i]
	g.MIG.Current = true
	for j, p := range profiles {
		g.MIGDevices = append(g.MIGDevices, gpu.MIGDevice{
			UUID: fmt.Sprintf("MIG-%d-%d", i, j), ParentIndex: i, ParentUUID: g.UUID,
			Profile: p, GPUInstanceID: j + 1, MemoryMiB: 10240,
		})
	}
	return n
}

func load(t *testing.T, yaml string) *configv1.Config {
	t.Helper()
	cfg, err := configv1.Load(strings.NewReader(yaml), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// summary renders resources as "name=count" lines.
func summary(rs []*Resource) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s=%d;", r.Name, len(r.Devices))
	}
	return b.String()
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name   string
		config string
		node   *node
		want   string
		check  func(t *testing.T, rs []*Resource)
	}{
		{
			name: "whole GPUs", config: "version: v1\n", node: newNode(8),
			want: "nvidia.com/gpu=8;",
			check: func(t *testing.T, rs []*Resource) {
				d := rs[0].Devices[3]
				if d.ID != "GPU-0003" || d.Index != "3" || d.Paths[0] != "/dev/nvidia3" || d.NUMANode != 0 || d.Shared() {
					t.Errorf("device 3 = %+v", d)
				}
			},
		},
		{
			name:   "seed time-slicing: each GPU appears as 4",
			config: "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: false\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			node:   newNode(8), want: "nvidia.com/gpu=32;",
			check: func(t *testing.T, rs []*Resource) {
				d := rs[0].Devices[5]
				if d.ID != "GPU-0001::1" || d.Replica != 1 || d.Replicas != 4 || d.Sharing != SharingTimeSlicing {
					t.Errorf("device 5 = %+v", d)
				}
				if UnitID(d.ID) != "GPU-0001" {
					t.Errorf("UnitID(%s) = %s", d.ID, UnitID(d.ID))
				}
			},
		},
		{
			name:   "renameByDefault adds .shared",
			config: "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
			node:   newNode(2), want: "nvidia.com/gpu.shared=4;",
			check: func(t *testing.T, rs []*Resource) {
				if !rs[0].FailRequestsGreaterThanOne {
					t.Error("failRequestsGreaterThanOne lost")
				}
			},
		},
		{
			name:   "per-GPU replicas and modes",
			config: "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      devices: [0, 1]\n      replicas: 2\n    - name: nvidia.com/gpu\n      devices: [2]\n      replicas: 5\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      rename: gpu-mps\n      devices: [3]\n      replicas: 4\n",
			node:   newNode(5).reserve(3, 511), want: "nvidia.com/gpu=10;nvidia.com/gpu-mps=4;",
			check: func(t *testing.T, rs []*Resource) {
				last := rs[0].Devices[9]
				if last.ID != "GPU-0004" || last.Shared() {
					t.Errorf("unselected GPU 4 = %+v, want a whole GPU", last)
				}
				mps := rs[1].Devices[0]
				if mps.Sharing != SharingMPS || mps.MPSMemoryLimitMiB() != (81559-511)/4 || mps.MPSActiveThreadPercentage() != 25 {
					t.Errorf("mps device = %+v, want a quarter of the memory the driver does not reserve, 25%% of the SMs", mps)
				}
			},
		},
		{
			name:   "devices by count",
			config: "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      devices: 1\n      replicas: 3\n",
			node:   newNode(2), want: "nvidia.com/gpu=4;",
		},
		{
			name: "MIG none keeps whole GPUs", config: "version: v1\n",
			node: newNode(2).mig(0, "1g.10gb", "1g.10gb"), want: "nvidia.com/gpu=2;",
		},
		{
			name: "MIG single", config: "version: v1\nflags:\n  migStrategy: single\n",
			node: newNode(2).mig(0, "1g.10gb", "1g.10gb").mig(1, "1g.10gb"), want: "nvidia.com/gpu=3;",
			check: func(t *testing.T, rs []*Resource) {
				if d := rs[0].Devices[1]; d.ID != "MIG-0-1" || d.Index != "0:2" || d.MIG == nil {
					t.Errorf("MIG device = %+v", d)
				}
			},
		},
		{
			name: "MIG mixed", config: "version: v1\nflags:\n  migStrategy: mixed\n",
			node: newNode(3).mig(0, "1g.10gb", "1g.10gb", "3g.40gb").mig(1, "7g.80gb"),
			want: "nvidia.com/gpu=1;nvidia.com/mig-1g.10gb=2;nvidia.com/mig-3g.40gb=1;nvidia.com/mig-7g.80gb=1;",
		},
		{
			name:   "MIG mixed with time-slicing and renames",
			config: "version: v1\nflags:\n  migStrategy: mixed\nresources:\n  mig:\n  - pattern: 3g.*\n    name: mig-medium\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 3\n",
			node:   newNode(1).mig(0, "1g.10gb", "3g.40gb"),
			want:   "nvidia.com/mig-1g.10gb=3;nvidia.com/mig-medium=1;",
		},
		{
			name: "resources.gpus renames by product", config: "version: v1\nresources:\n  gpus:\n  - pattern: \"*H100*\"\n    name: h100\n",
			node: newNode(2), want: "nvidia.com/h100=2;",
		},
		{
			name: "no GPUs", config: "version: v1\n", node: newNode(0), want: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Build(load(t, tc.config), tc.node.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(rs); got != tc.want {
				t.Fatalf("resources = %q, want %q", got, tc.want)
			}
			for _, r := range rs {
				for _, d := range r.Devices {
					if got, ok := r.Device(d.ID); !ok || got.ID != d.ID {
						t.Errorf("%s: lookup of %s failed", r.Name, d.ID)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, rs)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name   string
		config string
		node   *node
		want   []string
	}{
		{"single with different MIG devices", "version: v1\nflags:\n  migStrategy: single\n",
			newNode(2).mig(0, "1g.10gb").mig(1, "2g.20gb"), []string{"identical MIG devices", "1g.10gb on 0:1", "2g.20gb on 1:1", "mixed"}},
		{"single with MIG on some GPUs", "version: v1\nflags:\n  migStrategy: single\n",
			newNode(2).mig(0, "1g.10gb"), []string{"every GPU or on none", "GPUs 0", "GPUs 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(load(t, tc.config), tc.node.gpus)
			if !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("got %v, want ErrInvalidLayout", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
