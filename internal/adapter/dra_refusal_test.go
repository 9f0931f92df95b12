package adapter

import (
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
)

// numaSlice is gpuSlice with each GPU's NUMA node as an attribute.
func numaSlice(node string, numa ...int64) *resourceapi.ResourceSlice {
	s := gpuSlice(node, len(numa), "H100")
	for i, n := range numa {
		s.Spec.Devices[i].Attributes["numa"] = resourceapi.DeviceAttribute{IntValue: ptr.To(n)}
	}
	return s
}

// sameNUMAClaim asks for count GPUs on one NUMA node.
func sameNUMAClaim(name string, count int64) *resourceapi.ResourceClaim {
	cl := gpuClaim(name, "gpu.gpuplane.io", count)
	cl.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(dra.DriverName + "/numa"))}}
	return cl
}

// TestDRAClaimsRefusingTheCoresChoice checks that the core stays the only
// chooser of GPUs: when a claim's constraints refuse the GPUs it chose,
// the pod is not bound that cycle, the refusal is counted, and the next
// cycle the core chooses again among the GPUs that satisfy the claim
// (exact) or on another node (excluded); what is bound is the core's
// choice, and the claim's devices lie on it.
func TestDRAClaimsRefusingTheCoresChoice(t *testing.T) {
	for _, tt := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		// cordoned are nodes unschedulable in the first cycle, so that
		// the core's first choice is on the others.
		cordoned   []string
		constraint string
		wantNode   string
	}{
		{name: "exact", slices: []*resourceapi.ResourceSlice{numaSlice("a", 0, 1, 1, 0)}, constraint: "exact", wantNode: "a"},
		{name: "excluded", slices: []*resourceapi.ResourceSlice{numaSlice("a", 0, 1, 2, 3), numaSlice("b", 0, 0, 0, 0, 0, 0, 0, 0)},
			cordoned: []string{"b"}, constraint: "excluded", wantNode: "b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nodes := map[string]int{}
			for _, s := range tt.slices {
				nodes[*s.Spec.NodeName] = 0
			}
			f := newDRAFixture(t, nodes)
			for _, s := range tt.slices {
				f.cache.upsertSlice(s)
			}
			for _, n := range tt.cordoned {
				node := draNode(n)
				node.Spec.Unschedulable = true
				f.cache.upsertNode(node)
			}
			f.cache.upsertClaim(sameNUMAClaim("c", 2))
			f.cache.upsertPod(claimPod("p", "c"))
			f.cycle()
			if got := f.api.claimLog(); len(got) != 0 {
				t.Fatalf("claim writes %v after the first cycle, want none: the core's first choice breaks the constraint", got)
			}
			if !slices.ContainsFunc(f.status.events, func(e string) bool {
				return strings.HasPrefix(e, "FailedClaimAllocation p:") && strings.Contains(e, "constraints refuse")
			}) {
				t.Fatalf("events %v, want FailedClaimAllocation saying the constraints refuse the core's choice", f.status.events)
			}
			var m dto.Metric
			if err := f.loop.metrics.refusedChoices.WithLabelValues(tt.constraint).Write(&m); err != nil {
				t.Fatal(err)
			}
			if got := m.GetCounter().GetValue(); got != 1 {
				t.Errorf("gpuplane_scheduler_claim_choice_refusals_total{constraint=%q} = %v, want 1", tt.constraint, got)
			}
			for _, n := range tt.cordoned {
				f.cache.upsertNode(draNode(n))
			}
			f.cycle()
			log := f.api.claimLog()
			if len(log) != 1 || len(f.api.binds) != 1 {
				t.Fatalf("claim writes %v, binds %v after the second cycle, want the pod's", log, f.api.binds)
			}
			fields := strings.Fields(log[0])
			if fields[2] != tt.wantNode {
				t.Errorf("claim allocated on %s, want %s", fields[2], tt.wantNode)
			}
			bind := strings.Fields(f.api.binds[0])
			var onGPUs []string
			for _, sh := range strings.Split(bind[2], ",") {
				idx, _, _ := strings.Cut(sh, ":")
				onGPUs = append(onGPUs, bind[1]+"/gpu-"+idx)
			}
			devs := strings.Split(fields[3], ",")
			slices.Sort(devs)
			if !slices.Equal(devs, onGPUs) {
				t.Errorf("claim got %v, the core chose %v (bind %q): the claim must lie on the core's choice", devs, onGPUs, f.api.binds[0])
			}
			numa := map[int64]bool{}
			for _, d := range f.api.claimWrites[0].Alloc.Devices.Results {
				for _, s := range tt.slices {
					for _, dev := range s.Spec.Devices {
						if s.Spec.Pool.Name == d.Pool && dev.Name == d.Device {
							numa[*dev.Attributes["numa"].IntValue] = true
						}
					}
				}
			}
			if len(numa) != 1 {
				t.Errorf("claim devices %v span NUMA nodes %v, want one", devs, numa)
			}
		})
	}
}
