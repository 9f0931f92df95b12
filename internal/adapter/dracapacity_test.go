package adapter

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	agentdra "github.com/gpuplane/gpuplane/internal/dra"
)

// sharedSlice is gpuSlice with its GPUs published for consumable
// capacity, as the agent does with --dra-shared-gpus.
func sharedSlice(node string, gpus int) *resourceapi.ResourceSlice {
	s := gpuSlice(node, gpus, "H100")
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = agentdra.SharedCapacity(d.Capacity[apidra.CapacityMemory].Value)
	}
	return s
}

func capacityClaim(name, memory string) *resourceapi.ResourceClaim {
	c := gpuClaim(name, "gpu.gpuplane.io", 1)
	c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		apidra.CapacityMemory: resource.MustParse(memory),
	}}
	return c
}

func TestDRACapacityClaimsShareOneGPU(t *testing.T) {
	f := newDRAFixture(t, map[string]int{})
	f.cache.upsertNode(draNode("a"))
	f.cache.upsertSlice(sharedSlice("a", 1))
	for _, c := range []struct{ name, mem string }{{"p0", "20Gi"}, {"p1", "20Gi"}, {"p2", "50Gi"}} {
		f.cache.upsertClaim(capacityClaim(c.name, c.mem))
		f.cache.upsertPod(claimPod(c.name, c.name))
	}
	f.cycle()
	f.applyClaims()
	f.cycle()
	f.api.mu.Lock()
	writes := slices.Clone(f.api.claimWrites)
	f.api.mu.Unlock()
	shares := map[string]bool{}
	for _, w := range writes {
		if w.Alloc == nil {
			continue
		}
		r := w.Alloc.Devices.Results
		if len(r) != 1 || r[0].Device != "gpu-0" || r[0].ShareID == nil {
			t.Fatalf("claim %s: allocation %+v, want a share of gpu-0", w.Claim.Name, r)
		}
		got := r[0].ConsumedCapacity[apidra.CapacityMemory]
		if got.Cmp(resource.MustParse("20Gi")) != 0 {
			t.Errorf("claim %s consumed %s of memory, want 20Gi", w.Claim.Name, got.String())
		}
		shares[string(*r[0].ShareID)] = true
	}
	if len(shares) != 2 {
		t.Fatalf("claim writes %d with %d distinct shares, want the two 20Gi claims on gpu-0 (the 50Gi one does not fit beside them)", len(writes), len(shares))
	}
	bound := func(prefix string) bool {
		return slices.ContainsFunc(f.api.binds, func(b string) bool { return strings.HasPrefix(b, prefix) })
	}
	if !bound("ns/p0 a ") || !bound("ns/p1 a ") || bound("ns/p2 ") {
		t.Errorf("binds %v, want p0 and p1 on a, p2 waiting", f.api.binds)
	}
}

func TestDRACapacityRequestsRefused(t *testing.T) {
	tests := []struct {
		name  string
		claim func() *resourceapi.ResourceClaim
		want  string
	}{
		{"two devices with capacity", func() *resourceapi.ResourceClaim {
			c := capacityClaim("c", "20Gi")
			c.Spec.Devices.Requests[0].Exactly.Count = 2
			return c
		}, "ask for count 1"},
		{"unknown capacity", func() *resourceapi.ResourceClaim {
			c := capacityClaim("c", "20Gi")
			c.Spec.Devices.Requests[0].Exactly.Capacity.Requests["bandwidth"] = resource.MustParse("1")
			return c
		}, `capacity.requests["bandwidth"]`},
		{"compute above the GPU", func() *resourceapi.ResourceClaim {
			c := capacityClaim("c", "20Gi")
			c.Spec.Devices.Requests[0].Exactly.Capacity.Requests[apidra.CapacityCompute] = resource.MustParse("150")
			return c
		}, "0 to 100 percent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newDRAFixture(t, map[string]int{})
			f.cache.upsertNode(draNode("a"))
			f.cache.upsertSlice(sharedSlice("a", 1))
			f.cache.upsertClaim(tt.claim())
			f.cache.upsertPod(claimPod("p", "c"))
			f.cycle()
			if len(f.api.binds) != 0 {
				t.Fatalf("binds %v", f.api.binds)
			}
			if got := f.status.conditions["ns/p"]; !strings.Contains(got, tt.want) || !strings.Contains(got, "UnsupportedClaim") {
				t.Errorf("pod says %q, want UnsupportedClaim naming %q", got, tt.want)
			}
		})
	}
}

// BenchmarkClaimAllocationAllocator measures what turning on consumable
// capacity in the structured allocator (which makes it take its
// experimental implementation, as kube-scheduler 1.36 does by default)
// costs a whole-GPU claim, against the allocator without it, in one run.
func BenchmarkClaimAllocationAllocator(b *testing.B) {
	saved := dra.Features
	b.Cleanup(func() { dra.Features = saved })
	for _, tc := range []struct {
		name string
		on   bool
	}{{"consumable-capacity", true}, {"without-consumable-capacity", false}} {
		b.Run(tc.name, func(b *testing.B) {
			dra.Features = saved
			dra.Features.ConsumableCapacity = tc.on
			BenchmarkClaimAllocation(b)
		})
	}
}
