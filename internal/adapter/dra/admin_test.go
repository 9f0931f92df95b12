package dra

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// adminClaim asks for count devices of the class gpu.gpuplane.io with
// admin access.
func adminClaim(name string, count int64) *resourceapi.ResourceClaim {
	cl := gpuClaim(name, count)
	cl.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	return cl
}

func adminPending(p *corev1.Pod) Pending {
	pp := pending(p)
	pp.AdminNamespace = true
	return pp
}

// TestAdminAccessDeviceSet: requests with admin access ask the core for
// no GPU, only for a node with enough devices, in use or not; mixed with
// requests that take GPUs, or with capacity, they are refused naming the
// field.
func TestAdminAccessDeviceSet(t *testing.T) {
	classes := map[string]*resourceapi.DeviceClass{"gpu.gpuplane.io": gpuClass()}
	nodes := []NodeDevices{gpus("a", "A100", "A100"), gpus("b", "A100"), gpus("c")}
	set := EvalDeviceSet(nodes, []ClaimSpec{{Requests: adminClaim("c", 2).Spec.Devices.Requests}}, classes, dracel.NewCache(8, CELFeatures))
	if set.Err != "" || set.Count != 0 || !slices.Equal(set.AdminNodes, []bool{true, false, false}) || slices.ContainsFunc(set.Masks, func(m uint64) bool { return m != 0 }) {
		t.Fatalf("two devices with admin access: %+v, want no GPU asked, only node a (two devices) allowed", set)
	}
	mixed := []ClaimSpec{{Requests: adminClaim("c", 1).Spec.Devices.Requests}, {Requests: gpuClaim("d", 1).Spec.Devices.Requests}}
	if set := EvalDeviceSet(nodes, mixed, classes, dracel.NewCache(8, CELFeatures)); !strings.Contains(set.Err, "exactly.adminAccess") || set.ErrCode != "UnsupportedClaim" || set.ErrClaim != 0 {
		t.Fatalf("admin access beside a GPU for the pod: %+v, want refused naming adminAccess", set)
	}
	withCapacity := adminClaim("c", 1)
	withCapacity.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resourceQuantity("1Gi")}}
	if set := EvalDeviceSet(nodes, []ClaimSpec{{Requests: withCapacity.Spec.Devices.Requests}}, classes, dracel.NewCache(8, CELFeatures)); !strings.Contains(set.Err, "exactly.capacity") {
		t.Fatalf("admin access with capacity: %+v, want refused naming capacity", set)
	}
}

// TestAdminAccessAllocation: a claim with admin access in a namespace that
// allows it is allocated by the structured allocator on the core's node
// with devices other claims hold, holds no share of them, and leaves them
// to others; in a namespace without the label the pod waits with a
// reason naming the label; a node whose devices the claim's constraints
// refuse is excluded.
func TestAdminAccessAllocation(t *testing.T) {
	f := newFixture("a", "b")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 1))
	s.UpsertSlice(nodeSlice("b", 0))
	s.UpsertClass(gpuClass())
	s.UpsertClaim(allocated(gpuClaim("held", 1), "a", []string{"gpu-0"}, claimPod("user", "held")))
	s.UpsertClaim(adminClaim("mon", 2))
	p := claimPod("p", "mon")
	now := time.Now()

	if _, w := f.m.PodClaims(s, f.nodes(), pending(p), now); w == nil || w.Reason != "AdminAccessNotAllowed" || !strings.Contains(w.Msg, resourceapi.DRAAdminNamespaceLabelKey+"=true") ||
		!strings.Contains(w.Msg, "exactly.adminAccess") {
		t.Fatalf("admin access in a namespace without the label: %+v, want a wait naming the label and the field", w)
	}
	pc, w := f.m.PodClaims(s, f.nodes(), adminPending(p), now)
	if w != nil {
		t.Fatalf("admin access in a namespace with the label waits: %s", w.Msg)
	}
	if pc.Set.Count != 0 || !slices.Equal(pc.Set.AdminNodes, []bool{true, false}) {
		t.Fatalf("set %+v, want no GPU and node a only (b has one device)", pc.Set)
	}
	writes, err := s.AllocateChoice(context.Background(), view(s, "a"), nil, 0, p, pc, now)
	if err != nil {
		t.Fatalf("allocating with admin access on a: %v", err)
	}
	if len(writes) != 1 || writes[0].Alloc == nil || AllocationNode(writes[0].Alloc) != "a" || !slices.Equal(resultDevices(writes[0].Alloc), []string{"gpu-0", "gpu-1"}) {
		t.Fatalf("writes %+v, want the claim allocated gpu-0 (held by another claim) and gpu-1 of a", writes)
	}
	for _, r := range writes[0].Alloc.Devices.Results {
		if !ptr.Deref(r.AdminAccess, false) {
			t.Fatalf("result %+v without adminAccess", r)
		}
	}
	byPod, orphans := s.ClaimShares(view(s, "a"), map[types.UID]string{"uid-user": "ns/user"}, func(k string) bool { return k == "ns/p" || k == "ns/user" })
	if len(byPod["ns/p"]) != 0 || len(orphans) != 0 || !shareIndexes(byPod["ns/user"], []model.GPUShare{{Index: 0}}) {
		t.Fatalf("held %v, orphans %v: want the admin claim holding nothing, the user's claim GPU 0", byPod, orphans)
	}
	// gpu-1 stays free for a claim of another pod, as the allocator
	// judges it.
	s.UpsertClaim(gpuClaim("next", 1))
	u := claimPod("u", "next")
	next, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 1}}, 0, u, f.claims(t, u, now), now)
	if err != nil || len(next) != 1 || !slices.Equal(resultDevices(next[0].Alloc), []string{"gpu-1"}) {
		t.Fatalf("allocating gpu-1 beside the admin claim: %v, %+v; want it given", err, next)
	}
	s.Forget("ns/u", next)
	s.Forget("ns/p", writes)

	// Constraints the node's devices cannot meet: the allocator refuses
	// and the node leaves the pod's set.
	cons := adminClaim("mon2", 2)
	cons.Spec.Devices.Constraints = numaClaim("x", 2).Spec.Devices.Constraints
	s.UpsertClaim(cons)
	q := claimPod("q", "mon2")
	qc, w := f.m.PodClaims(s, f.nodes(), adminPending(q), now)
	if w != nil {
		t.Fatal(w.Msg)
	}
	_, err = s.AllocateChoice(context.Background(), view(s, "a"), nil, 0, q, qc, now)
	var refused *RefusedError
	if !errors.As(err, &refused) || !refused.Excluded {
		t.Fatalf("admin claim whose constraints a refuses: %v, want a refusal excluding a", err)
	}
	qc, _ = f.m.PodClaims(s, f.nodes(), adminPending(q), now.Add(time.Second))
	if !slices.Equal(qc.Set.AdminNodes, []bool{false, false}) {
		t.Fatalf("after the refusal the admin nodes are %v, want none", qc.Set.AdminNodes)
	}
}
