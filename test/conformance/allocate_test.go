package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// twoQuads is an 8-GPU node whose GPUs are NVLinked in two quads only, so
// that a good choice of GPUs is visible.
const twoQuads = `name: twoquads
gpus:
  - model: H100-SXM5-80GB
    count: 8
    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
topology:
  pairs:
    - {gpus: [0, 1], nvlink: 4}
    - {gpus: [0, 2], nvlink: 4}
    - {gpus: [0, 3], nvlink: 4}
    - {gpus: [1, 2], nvlink: 4}
    - {gpus: [1, 3], nvlink: 4}
    - {gpus: [2, 3], nvlink: 4}
    - {gpus: [4, 5], nvlink: 4}
    - {gpus: [4, 6], nvlink: 4}
    - {gpus: [4, 7], nvlink: 4}
    - {gpus: [5, 6], nvlink: 4}
    - {gpus: [5, 7], nvlink: 4}
    - {gpus: [6, 7], nvlink: 4}
`

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

func TestAllocateNVLinkSets(t *testing.T) {
	profiles := []struct {
		name, profile string
		// clique is the largest set of GPUs all NVLinked to each other.
		clique int64
	}{
		{"DGX H100", "dgxh100", 8},
		{"two NVLink quads", twoQuads, 4},
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
			for _, size := range []int64{1, 2, 4, 8} {
				t.Run(fmt.Sprintf("%d GPUs", size), func(t *testing.T) {
					k.releaseAll()
					a, err := k.admit("nvidia.com/gpu", size)
					if err != nil {
						t.Fatal(err)
					}
					idx := gpuIndexes(t, devs, a.devices)
					if int64(len(idx)) != size {
						t.Fatalf("got %d devices, want %d", len(idx), size)
					}
					if size > 1 && size <= pc.clique && !allNVLinked(topo, idx) {
						t.Errorf("GPUs %v are not all NVLink-connected", idx)
					}
					visible := strings.Split(a.env("NVIDIA_VISIBLE_DEVICES"), ",")
					slices.Sort(visible)
					ids := slices.Clone(a.devices)
					slices.Sort(ids)
					if !slices.Equal(visible, ids) {
						t.Errorf("NVIDIA_VISIBLE_DEVICES %v, want the allocated %v", visible, ids)
					}
				})
			}
			t.Run("two pairs are each NVLink-connected", func(t *testing.T) {
				k.releaseAll()
				first, err := k.admit("nvidia.com/gpu", 2)
				if err != nil {
					t.Fatal(err)
				}
				second, err := k.admit("nvidia.com/gpu", 2)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range []*allocation{first, second} {
					if idx := gpuIndexes(t, devs, a.devices); !allNVLinked(topo, idx) {
						t.Errorf("pair %v not NVLink-connected", idx)
					}
				}
			})
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
