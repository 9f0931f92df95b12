package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// quads returns the profile of an 8-GPU node whose GPUs are NVLinked in
// two quads only, each quad on a NUMA node of its own, so that a good
// choice of GPUs is visible.
func quads(name string, quads [2][4]int) string {
	numa := make([]string, 8)
	var pairs strings.Builder
	for q, quad := range quads {
		for a, i := range quad {
			numa[i] = fmt.Sprint(q)
			for _, j := range quad[a+1:] {
				fmt.Fprintf(&pairs, "    - {gpus: [%d, %d], nvlink: 4}\n", i, j)
			}
		}
	}
	return fmt.Sprintf("name: %s\ngpus:\n  - model: H100-SXM5-80GB\n    count: 8\n    numaNodes: [%s]\ntopology:\n  pairs:\n%s",
		name, strings.Join(numa, ", "), pairs.String())
}

var (
	// twoQuads links GPUs 0-3 and 4-7.
	twoQuads = quads("twoquads", [2][4]int{{0, 1, 2, 3}, {4, 5, 6, 7}})
	// interleavedQuads links the even GPUs and the odd ones: GPUs of
	// neighbouring indexes have no NVLink.
	interleavedQuads = quads("interleavedquads", [2][4]int{{0, 2, 4, 6}, {1, 3, 5, 7}})
)

// gpuIndexes maps allocated device IDs to GPU indexes.
func gpuIndexes(t *testing.T, devs []gpu.Device, ids []string) []int {
	t.Helper()
	var out []int
	for _, id := range ids {
		uuid, _, _ := strings.Cut(id, "::")
		i := slices.IndexFunc(devs, func(d gpu.Device) bool { return d.UUID == uuid })
		if i < 0 {
			t.Fatalf("allocated device %s is no GPU of the node", id)
		}
		out = append(out, devs[i].Index)
	}
	slices.Sort(out)
	return out
}

// allNVLinked reports whether every pair of the GPUs has NVLink.
func allNVLinked(topo *gpu.Topology, idx []int) bool {
	for a := range idx {
		for b := a + 1; b < len(idx); b++ {
			if l, ok := topo.Between(idx[a], idx[b]); !ok || l.NVLinks == 0 {
				return false
			}
		}
	}
	return true
}

// TestAllocateNVLinkSets: every set of GPUs the plugin prefers is NVLinked
// throughout when the node has such a set free. The quads are laid out,
// and GPUs held, so that a choice by index or in the order the kubelet
// lists devices crosses them: on interleavedQuads GPUs 0 and 1 have no
// NVLink; on twoQuads, with three GPUs of a quad held, the lowest free
// pair straddles the quads, and with one GPU held so do the lowest four.
func TestAllocateNVLinkSets(t *testing.T) {
	profiles := []struct {
		name, profile string
		// clique is the largest set of GPUs all NVLinked to each other.
		clique int64
	}{
		{"DGX H100", "dgxh100", 8},
		{"two NVLink quads", twoQuads, 4},
		{"interleaved NVLink quads", interleavedQuads, 4},
	}
	for _, pc := range profiles {
		profile := pc.profile
		t.Run(pc.name, func(t *testing.T) {
			k := startKubelet(t)
			n := startAgent(t, profile, "version: v1\n", nil)
			k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
			devs, err := n.sim.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			topo, err := n.sim.Topology(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// admit allocates size GPUs, beside those already held, and
			// checks that they are NVLinked throughout when the node has
			// a clique that large.
			admit := func(t *testing.T, size int64) []int {
				t.Helper()
				a, err := k.admit("nvidia.com/gpu", size)
				if err != nil {
					t.Fatal(err)
				}
				idx := gpuIndexes(t, devs, a.devices)
				if int64(len(idx)) != size {
					t.Fatalf("got %d devices, want %d", len(idx), size)
				}
				if size > 1 && size <= pc.clique && !allNVLinked(topo, idx) {
					t.Errorf("GPUs %v for a request of %d are not all NVLink-connected", idx, size)
				}
				visible := strings.Split(a.env("NVIDIA_VISIBLE_DEVICES"), ",")
				slices.Sort(visible)
				ids := slices.Clone(a.devices)
				slices.Sort(ids)
				if !slices.Equal(visible, ids) {
					t.Errorf("NVIDIA_VISIBLE_DEVICES %v, want the allocated %v", visible, ids)
				}
				return idx
			}
			for _, size := range []int64{1, 2, 4, 8} {
				t.Run(fmt.Sprintf("%d GPUs", size), func(t *testing.T) {
					k.releaseAll()
					admit(t, size)
				})
			}
			tests := []struct {
				name string
				// sizes are admitted in order, each beside the ones
				// before.
				sizes []int64
			}{
				{"two pairs", []int64{2, 2}},
				{"pairs beside three held GPUs", []int64{3, 2, 2}},
				{"a quad beside one held GPU", []int64{1, 4}},
				{"a pair beside a held pair and a held GPU", []int64{2, 1, 2}},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					k.releaseAll()
					var held []int
					for _, size := range tc.sizes {
						idx := admit(t, size)
						if slices.ContainsFunc(idx, func(i int) bool { return slices.Contains(held, i) }) {
							t.Fatalf("GPUs %v given again beside the held %v", idx, held)
						}
						held = append(held, idx...)
					}
				})
			}
		})
	}
}

func TestAllocateSharedOnDistinctGPUs(t *testing.T) {
	for _, policy := range []string{"distributed", "packed"} {
		t.Run(policy, func(t *testing.T) {
			k := startKubelet(t)
			n := startAgent(t, "dgxh100", "version: v1\nsharing:\n  allocationPolicy: "+policy+"\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n", nil)
			k.waitCounts(5*time.Second, "nvidia.com/gpu", 80, 80)
			devs, err := n.sim.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			a, err := k.admit("nvidia.com/gpu", 4)
			if err != nil {
				t.Fatal(err)
			}
			if idx := gpuIndexes(t, devs, a.devices); len(slices.Compact(idx)) != 4 {
				t.Errorf("4 replicas landed on GPUs %v, want 4 distinct GPUs", idx)
			}
		})
	}
}
