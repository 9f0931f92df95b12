package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// nodeSlice is the slice gpuplane's driver publishes for node: GPUs
// gpu-0.. with the NUMA node given for each.
func nodeSlice(node string, numa ...int64) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: apidra.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	for i, n := range numa {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprint("gpu-", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			apidra.AttrType: {StringValue: ptr.To(apidra.TypeGPU)}, apidra.AttrIndex: {IntValue: ptr.To(int64(i))}, "numa": {IntValue: ptr.To(n)}}})
	}
	return s
}

func k8sNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func noTopology(*gpunode.Topology) *gpu.Topology { return nil }

// view is node as the State makes it from its slices.
func view(s *State, name string) NodeView {
	n := k8sNode(name)
	m, devs := s.NodeGPUs(n, model.Node{Name: name}, noTopology)
	return NodeView{Node: n, GPUs: m.GPUs, Devs: devs}
}

// claimPod is a pod in namespace ns naming the claims given.
func claimPod(name string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	for i, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: fmt.Sprint("c", i), ResourceClaimName: ptr.To(c)})
	}
	return p
}

func pending(p *corev1.Pod) Pending {
	return Pending{Pod: p, Key: p.Namespace + "/" + p.Name, Req: &model.Request{}}
}

// allocated is cl allocated the devices given on node and reserved for
// the pods given.
func allocated(cl *resourceapi.ResourceClaim, node string, devices []string, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	cl = cl.DeepCopy()
	a := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: apidra.DriverName, Pool: node, Device: d})
	}
	cl.Status.Allocation = a
	for _, p := range pods {
		cl.Status.ReservedFor = append(cl.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return cl
}

// fixture is a State with the touched nodes recorded, and a Memo over
// the nodes given.
type fixture struct {
	s       *State
	m       Memo
	touched map[string]int
	names   []string
	// version is the builder's nodes version; lists counts the times the
	// memo listed the nodes.
	version, lists int
}

func newFixture(nodes ...string) *fixture {
	f := &fixture{touched: map[string]int{}, names: nodes}
	f.s = NewState(func(n string) { f.touched[n]++ })
	return f
}

func (f *fixture) nodes() Nodes {
	return Nodes{Version: f.version, List: func() []NodeView {
		f.lists++
		out := make([]NodeView, len(f.names))
		for i, n := range f.names {
			out[i] = view(f.s, n)
		}
		return out
	}}
}

func (f *fixture) claims(t *testing.T, p *corev1.Pod, now time.Time) *Claims {
	t.Helper()
	pc, w := f.m.PodClaims(f.s, f.nodes(), pending(p), now)
	if w != nil {
		t.Fatalf("pod %s waits: %s: %s", p.Name, w.Reason, w.Msg)
	}
	return pc
}

func gpuNames(v NodeView) []string {
	var out []string
	for _, d := range v.Devs {
		out = append(out, d.Name)
	}
	return out
}

// TestSlim: the informer's cache keeps all of a node's slice of
// gpuplane's driver and only where another driver's is; of a claim, the
// allocation and consumers, not the drivers' device status.
func TestSlim(t *testing.T) {
	ours := nodeSlice("a", 0)
	if got := SlimSlice(ours); got != ours || len(got.Spec.Devices) != 1 {
		t.Fatalf("gpuplane's slice slimmed to %+v, want it whole", got.Spec)
	}
	other := nodeSlice("a", 0)
	other.Spec.Driver = "other.example.com"
	if got := SlimSlice(other); len(got.Spec.Devices) != 0 || got.Spec.NodeName == nil || *got.Spec.NodeName != "a" || got.Name != other.Name {
		t.Fatalf("another driver's slice slimmed to %+v, want its name and node only", got)
	}
	cl := allocated(gpuClaim("c", 1), "a", []string{"gpu-0"}, claimPod("p"))
	cl.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: apidra.DriverName, Pool: "a", Device: "gpu-0"}}
	if got := SlimClaim(cl); got.Status.Devices != nil || got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 {
		t.Fatalf("claim slimmed to %+v, want its allocation and consumers without device status", got.Status)
	}
}

// TestStateSlices: slices of gpuplane's driver make a node's GPUs, the
// newest generation of a pool wins, a slice moved or deleted refreshes
// the nodes it named, and every change that can change a device set
// changes Version.
func TestStateSlices(t *testing.T) {
	f := newFixture("a", "b")
	s := f.s
	other := nodeSlice("a", 0)
	other.Name, other.Spec.Driver = "other", "other.example.com"
	if nodes := s.UpsertSlice(other); nodes != nil || s.Version() != 0 {
		t.Fatalf("another driver's slice refreshes %v (version %d), want nothing", nodes, s.Version())
	}
	if got := view(s, "a"); len(got.GPUs) != 0 {
		t.Fatalf("another driver's devices are GPUs of a: %v", got.GPUs)
	}
	v := s.Version()
	if nodes := s.UpsertSlice(nodeSlice("a", 0, 0)); !slices.Equal(nodes, []string{"a"}) || s.Version() == v {
		t.Fatalf("a slice for a refreshes %v, version %d to %d; want [a] and a new version", nodes, v, s.Version())
	}
	if got := view(s, "a"); len(got.GPUs) != 2 || !got.GPUs[0].ClaimOnly || !slices.Equal(gpuNames(got), []string{"gpu-0", "gpu-1"}) {
		t.Fatalf("a's GPUs %+v devices %v, want 2 claim-only GPUs gpu-0, gpu-1", got.GPUs, gpuNames(got))
	}
	moved := nodeSlice("b", 0, 0)
	moved.Name = "a-gpus"
	v = s.Version()
	if nodes := s.UpsertSlice(moved); !slices.Equal(nodes, []string{"a", "b"}) || s.Version() == v {
		t.Fatalf("a slice moved from a to b refreshes %v, want [a b] and a new version", nodes)
	}
	if a, b := view(s, "a"), view(s, "b"); len(a.GPUs) != 0 || len(b.GPUs) != 2 {
		t.Fatalf("after the move a has %d GPUs and b %d, want 0 and 2", len(a.GPUs), len(b.GPUs))
	}
	newer := nodeSlice("b", 0)
	newer.Name, newer.Spec.Pool.Generation = "b-gpus-2", 2
	s.UpsertSlice(newer)
	if b := view(s, "b"); len(b.GPUs) != 1 {
		t.Fatalf("b has %d GPUs with a newer generation of its pool publishing 1, want 1", len(b.GPUs))
	}
	if nodes := s.DeleteSlice(nodeSlice("c")); nodes != nil {
		t.Fatalf("deleting an unknown slice refreshes %v", nodes)
	}
	v = s.Version()
	if nodes := s.DeleteSlice(newer); !slices.Equal(nodes, []string{"b"}) || s.Version() == v {
		t.Fatalf("deleting b's newer slice refreshes %v, want [b] and a new version", nodes)
	}
	if b := view(s, "b"); len(b.GPUs) != 2 {
		t.Fatalf("b has %d GPUs once its newer slice is gone, want the older generation's 2", len(b.GPUs))
	}
	// A slice switched to another driver is forgotten.
	gone := moved.DeepCopy()
	gone.Spec.Driver = "other.example.com"
	if nodes := s.UpsertSlice(gone); !slices.Equal(nodes, []string{"b"}) || len(view(s, "b").GPUs) != 0 {
		t.Fatalf("a slice turned to another driver refreshes %v and leaves b %d GPUs, want [b] and none", nodes, len(view(s, "b").GPUs))
	}
}

// TestStateClasses: device sets follow the DeviceClasses: a claim of a
// class that is missing waits, and its set comes and goes with the class,
// the memo never keeping one made before the change.
func TestStateClasses(t *testing.T) {
	f := newFixture("a")
	f.s.UpsertSlice(nodeSlice("a", 0, 0))
	f.s.UpsertClaim(gpuClaim("c", 1))
	p := claimPod("p", "c")
	now := time.Now()
	if _, w := f.m.PodClaims(f.s, f.nodes(), pending(p), now); w == nil || w.Reason != "DeviceClassNotFound" {
		t.Fatalf("a claim of a missing class: wait %+v, want DeviceClassNotFound", w)
	}
	v := f.s.Version()
	f.s.UpsertClass(gpuClass())
	if f.s.Version() == v {
		t.Fatalf("adding a class left the version at %d", v)
	}
	pc := f.claims(t, p, now)
	if pc.Set == nil || pc.Set.Count != 1 || pc.Set.Masks[0] != 0b11 || len(pc.Alloc) != 1 {
		t.Fatalf("claims %+v, set %+v: want one claim to allocate, one device of a's 2 GPUs", pc, pc.Set)
	}
	v = f.s.Version()
	f.s.DeleteClass(gpuClass())
	if f.s.Version() == v {
		t.Fatalf("deleting a class left the version at %d", v)
	}
	if _, w := f.m.PodClaims(f.s, f.nodes(), pending(p), now); w == nil || w.Reason != "DeviceClassNotFound" {
		t.Fatalf("the class deleted: wait %+v, want DeviceClassNotFound, not the set made before", w)
	}
}

// TestStateClaims: the informer's claims are indexed on the node their
// allocation names, the nodes they leave and join are touched, and what
// they hold counts for the pod they are reserved for, or for none.
func TestStateClaims(t *testing.T) {
	f := newFixture("a", "b")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 0))
	s.UpsertSlice(nodeSlice("b", 0, 0))
	clear(f.touched)
	p := claimPod("p", "c")
	s.UpsertClaim(gpuClaim("c", 1))
	if s.ClaimsOn("a") != 0 || len(f.touched) != 0 || s.Claim("ns/c") == nil {
		t.Fatalf("an unallocated claim is on a (%d) or touched %v, or not kept", s.ClaimsOn("a"), f.touched)
	}
	s.UpsertClaim(allocated(gpuClaim("c", 1), "a", []string{"gpu-1"}, p))
	if s.ClaimsOn("a") != 1 || f.touched["a"] == 0 {
		t.Fatalf("a claim allocated on a: %d claims on a, touched %v", s.ClaimsOn("a"), f.touched)
	}
	byPod, orphans := s.ClaimShares(view(s, "a"), map[types.UID]string{p.UID: "ns/p"}, func(k string) bool { return k == "ns/p" })
	if want := []model.GPUShare{{Index: 1}}; len(orphans) != 0 || !shareIndexes(byPod["ns/p"], want) {
		t.Fatalf("p's claim holds %v, orphans %v; want p holding GPU 1", byPod, orphans)
	}
	byPod, orphans = s.ClaimShares(view(s, "a"), nil, func(string) bool { return false })
	if len(byPod) != 0 || !shareIndexes(orphans["ns/c"], []model.GPUShare{{Index: 1}}) {
		t.Fatalf("with p not on a: held %v, orphans %v; want the claim holding GPU 1 for no pod", byPod, orphans)
	}
	allocs := OrphanAllocations("a", orphans)
	if len(allocs) != 1 || allocs[0].Pod != ClaimAllocationPrefix+"ns/c" || !allocs[0].NonPreemptible || allocs[0].Request.GPUs != 1 {
		t.Fatalf("orphan allocations %+v, want one non-preemptible allocation of 1 GPU for claim ns/c", allocs)
	}
	clear(f.touched)
	s.UpsertClaim(allocated(gpuClaim("c", 1), "b", []string{"gpu-0"}, p))
	if s.ClaimsOn("a") != 0 || s.ClaimsOn("b") != 1 || f.touched["a"] == 0 || f.touched["b"] == 0 {
		t.Fatalf("a claim moved to b: %d on a, %d on b, touched %v; want 0, 1, both touched", s.ClaimsOn("a"), s.ClaimsOn("b"), f.touched)
	}
	clear(f.touched)
	s.DeleteClaim(gpuClaim("c", 1))
	if s.ClaimsOn("b") != 0 || f.touched["b"] == 0 || s.Claim("ns/c") != nil {
		t.Fatalf("a deleted claim: %d on b, touched %v, kept %v", s.ClaimsOn("b"), f.touched, s.Claim("ns/c") != nil)
	}
	// Nodes whose claims all went keep no entry: nodes replaced for good
	// would otherwise pile up.
	if len(s.onNode) != 0 || len(s.claimNode) != 0 {
		t.Fatalf("no claim left, yet the index keeps nodes %v and claims %v", s.onNode, s.claimNode)
	}
}

func shareIndexes(got, want []model.GPUShare) bool {
	return slices.EqualFunc(got, want, func(a, b model.GPUShare) bool { return a.Index == b.Index && a.MIGSlices == b.MIGSlices })
}

// TestStateInFlight: an allocation on the core's choice is in flight
// until the informer shows the claim allocated and reserved for its pod;
// meanwhile it holds its devices, pins the claim's other pods to its node
// and is not allocated twice; Forget drops it.
func TestStateInFlight(t *testing.T) {
	f := newFixture("a", "b")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 0, 0, 0))
	s.UpsertSlice(nodeSlice("b", 0, 0, 0, 0))
	s.UpsertClass(gpuClass())
	s.UpsertClaim(gpuClaim("c", 2))
	p, q := claimPod("p", "c"), claimPod("q", "c")
	now := time.Now()
	pc := f.claims(t, p, now)
	clear(f.touched)
	writes, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 1}, {Index: 2}}, 0, p, pc, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) != 1 || writes[0].Alloc == nil || AllocationNode(writes[0].Alloc) != "a" || writes[0].Pod != p {
		t.Fatalf("writes %+v, want one allocation on a for p", writes)
	}
	if got := resultDevices(writes[0].Alloc); !slices.Equal(got, []string{"gpu-1", "gpu-2"}) {
		t.Fatalf("allocated %v, want exactly the core's choice gpu-1, gpu-2", got)
	}
	if s.InFlight() != 1 || s.ClaimsOn("a") != 1 || f.touched["a"] == 0 {
		t.Fatalf("%d in flight, %d claims on a, touched %v; want the allocation in flight on a", s.InFlight(), s.ClaimsOn("a"), f.touched)
	}
	byPod, _ := s.ClaimShares(view(s, "a"), nil, func(k string) bool { return k == "ns/p" })
	if !shareIndexes(byPod["ns/p"], []model.GPUShare{{Index: 1}, {Index: 2}}) {
		t.Fatalf("in flight, p holds %v on a, want GPUs 1 and 2", byPod)
	}
	byPod, orphans := s.ClaimShares(view(s, "a"), nil, func(string) bool { return false })
	if len(byPod) != 0 || !shareIndexes(orphans["ns/c"], []model.GPUShare{{Index: 1}, {Index: 2}}) {
		t.Fatalf("in flight for p, not on a yet: held %v, orphans %v; want the claim holding GPUs 1 and 2 for no pod", byPod, orphans)
	}
	if _, err := s.AllocateChoice(context.Background(), view(s, "b"), []model.GPUShare{{Index: 0}, {Index: 1}}, 0, q, pc, now); err == nil || !strings.Contains(err.Error(), "being allocated for another pod") {
		t.Fatalf("allocating a claim in flight again: %v, want it refused", err)
	}
	if qc := f.claims(t, q, now); qc.Node != "a" || len(qc.Shared) != 1 || len(qc.Alloc) != 0 || qc.Set != nil {
		t.Fatalf("q sharing the claim in flight: %+v, want it pinned to a, joining the claim", qc)
	}
	s.UpsertClaim(allocated(gpuClaim("c", 2), "a", []string{"gpu-1", "gpu-2"}))
	if s.InFlight() != 1 {
		t.Fatalf("the informer shows the claim allocated, not yet reserved for p: %d in flight, want 1", s.InFlight())
	}
	s.UpsertClaim(allocated(gpuClaim("c", 2), "a", []string{"gpu-1", "gpu-2"}, p))
	if s.InFlight() != 0 || s.ClaimsOn("a") != 1 {
		t.Fatalf("the informer shows the claim allocated and reserved: %d in flight, %d on a; want 0 and 1", s.InFlight(), s.ClaimsOn("a"))
	}

	// q joins the allocated claim: a reservation in flight, which Forget
	// drops without touching the allocation.
	qc := f.claims(t, q, now)
	writes, err = s.AllocateChoice(context.Background(), view(s, "a"), nil, 0, q, qc, now)
	if err != nil || len(writes) != 1 || writes[0].Alloc != nil || s.InFlight() != 1 {
		t.Fatalf("q joining: writes %+v, err %v, %d in flight; want one reservation in flight", writes, err, s.InFlight())
	}
	s.Forget("ns/q", writes)
	if s.InFlight() != 0 || s.ClaimsOn("a") != 1 {
		t.Fatalf("q's reservation forgotten: %d in flight, %d on a; want 0 and the claim still on a", s.InFlight(), s.ClaimsOn("a"))
	}

	// An allocation forgotten (its bind failed) frees its node.
	s.UpsertClaim(gpuClaim("d", 1))
	r := claimPod("r", "d")
	writes, err = s.AllocateChoice(context.Background(), view(s, "b"), []model.GPUShare{{Index: 3}}, 0, r, f.claims(t, r, now), now)
	if err != nil || s.ClaimsOn("b") != 1 {
		t.Fatalf("allocating d on b: %v, %d on b", err, s.ClaimsOn("b"))
	}
	s.Forget("ns/r", writes)
	if s.InFlight() != 0 || s.ClaimsOn("b") != 0 {
		t.Fatalf("d forgotten: %d in flight, %d on b; want none", s.InFlight(), s.ClaimsOn("b"))
	}
}

func resultDevices(a *resourceapi.AllocationResult) []string {
	var out []string
	for _, r := range a.Devices.Results {
		out = append(out, r.Device)
	}
	slices.Sort(out)
	return out
}

// numaClaim asks for count devices on one NUMA node.
func numaClaim(name string, count int64) *resourceapi.ResourceClaim {
	cl := gpuClaim(name, count)
	cl.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(apidra.DriverName + "/numa"))}}
	return cl
}

// TestStateRefusal: claims that refuse the core's choice allocate
// nothing, and the pod's next device set is exact on that node (only the
// GPUs the allocator finds to satisfy them, none when it finds none),
// until the refusal expires, slices or classes change, or the pod is
// allocated.
func TestStateRefusal(t *testing.T) {
	f := newFixture("a", "b")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 1, 1, 2))
	s.UpsertSlice(nodeSlice("b", 0, 0, 0, 0))
	s.UpsertClass(gpuClass())
	s.UpsertClaim(numaClaim("c", 2))
	p := claimPod("p", "c")
	now := time.Now()
	base := f.claims(t, p, now).Set
	if base.Masks[0] != 0b1111 || base.Masks[1] != 0b1111 {
		t.Fatalf("base set masks %b, want every GPU of a and b", base.Masks)
	}
	_, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 0}, {Index: 1}}, 0, p, f.claims(t, p, now), now)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Node != "a" || refused.Excluded || refused.Constraint() != "exact" {
		t.Fatalf("claims refusing GPUs 0 and 1 of a: %v, want an exact refusal on a", err)
	}
	if s.InFlight() != 0 || s.ClaimsOn("a") != 0 {
		t.Fatalf("a refused choice left %d allocations in flight", s.InFlight())
	}
	exact := f.claims(t, p, now.Add(time.Second)).Set
	if exact == base || !strings.HasPrefix(exact.Name, base.Name+"/exact-") || exact.Masks[0] != 0b0110 || exact.Masks[1] != base.Masks[1] || exact.Count != base.Count {
		t.Fatalf("after the refusal the set is %s %b, want %s made exact on a: GPUs 1 and 2 (one NUMA node), b unchanged", exact.Name, exact.Masks, base.Name)
	}
	if base.Masks[0] != 0b1111 {
		t.Fatalf("making the set exact wrote the base set: %b", base.Masks)
	}
	if again := f.claims(t, p, now.Add(2*time.Second)).Set; again != exact {
		t.Fatalf("the same refusal made a second exact set %s", again.Name)
	}
	if other := f.claims(t, claimPod("q", "c"), now).Set; other != base {
		t.Fatalf("another pod of the same claim got set %s, want the base set", other.Name)
	}
	if late := f.claims(t, p, now.Add(RefusalTTL+time.Second)).Set; late != base {
		t.Fatalf("past RefusalTTL the set is %s, want the base set %s", late.Name, base.Name)
	}

	// A change of slices or classes ends the refusal.
	s.UpsertClass(gpuClass())
	if set := f.claims(t, p, now.Add(time.Second)).Set; strings.Contains(set.Name, "/exact-") {
		t.Fatalf("after the class changed the set is %s, want no longer exact", set.Name)
	}

	// The pod's next allocation ends it too.
	_, err = s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 0}, {Index: 1}}, 0, p, f.claims(t, p, now), now)
	if !errors.As(err, &refused) {
		t.Fatalf("want a second refusal, got %v", err)
	}
	writes, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 1}, {Index: 2}}, 0, p, f.claims(t, p, now), now)
	if err != nil {
		t.Fatalf("allocating on the GPUs the claims accept: %v", err)
	}
	s.Forget("ns/p", writes)
	if set := f.claims(t, p, now.Add(time.Second)).Set; strings.Contains(set.Name, "/exact-") {
		t.Fatalf("after the pod's next allocation the set is %s, want no longer exact", set.Name)
	}

	// No free devices of the node satisfy the claims: the node is
	// excluded from the pod's set.
	s.UpsertSlice(nodeSlice("a", 0, 1, 2, 3))
	_, err = s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 0}, {Index: 1}}, 0, p, f.claims(t, p, now), now)
	if !errors.As(err, &refused) || !refused.Excluded || refused.Constraint() != "excluded" {
		t.Fatalf("no two GPUs of a share a NUMA node: %v, want a refusal excluding a", err)
	}
	if set := f.claims(t, p, now.Add(time.Second)).Set; set.Masks[0] != 0 || set.Masks[1] != 0b1111 {
		t.Fatalf("after the exclusion the set's masks are %b, want none of a and all of b", set.Masks)
	}
}

// TestMemoReads: what the builder reads of a pending pod's claims: why it
// waits, the claims that pin it, and device sets kept while slices,
// classes and nodes stay the same and made again when they change.
func TestMemoReads(t *testing.T) {
	f := newFixture("a", "b")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 0))
	s.UpsertSlice(nodeSlice("b", 0, 0))
	s.UpsertClass(gpuClass())
	now := time.Now()

	deleting := gpuClaim("deleting", 1)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	s.UpsertClaim(deleting)
	s.UpsertClaim(allocated(gpuClaim("on-a", 1), "a", []string{"gpu-0"}))
	s.UpsertClaim(allocated(gpuClaim("on-b", 1), "b", []string{"gpu-0"}))
	template := claimPod("template")
	template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}}
	mixed := pending(claimPod("mixed", "on-a"))
	mixed.Req = &model.Request{GPUs: 1}
	for _, tc := range []struct {
		pod    Pending
		reason string
	}{
		{pending(claimPod("missing", "nope")), "ResourceClaimNotFound"},
		{pending(template), "WaitingForResourceClaim"},
		{pending(claimPod("deleting", "deleting")), "ResourceClaimDeleted"},
		{pending(claimPod("split", "on-a", "on-b")), "ClaimsOnDifferentNodes"},
		{mixed, "MixedGPURequest"},
	} {
		if _, w := f.m.PodClaims(s, f.nodes(), tc.pod, now); w == nil || w.Reason != tc.reason || !strings.Contains(w.Msg, "ResourceClaim") && tc.reason != "MixedGPURequest" {
			t.Errorf("pod %s: wait %+v, want %s naming the claim", tc.pod.Key, w, tc.reason)
		}
	}
	if pc := f.claims(t, claimPod("pinned", "on-a"), now); pc.Node != "a" || len(pc.Shared) != 1 || pc.Set != nil {
		t.Errorf("a pod of a claim allocated on a: %+v, want it pinned to a", pc)
	}

	s.UpsertClaim(gpuClaim("c", 1))
	p := claimPod("p", "c")
	first := f.claims(t, p, now).Set
	lists := f.lists
	if again := f.claims(t, p, now).Set; again != first || f.lists != lists {
		t.Fatalf("the same claim object made set %s again (nodes listed %d more times), want %s kept", again.Name, f.lists-lists, first.Name)
	}
	s.UpsertClaim(gpuClaim("c", 1))
	if same := f.claims(t, p, now).Set; same.Name != first.Name {
		t.Fatalf("a new object of the same claim shape got set %s, want the shape's %s", same.Name, first.Name)
	}
	s.UpsertClaim(gpuClaim("c", 2))
	if changed := f.claims(t, p, now).Set; changed.Count != 2 {
		t.Fatalf("the claim changed to 2 devices: its set asks for %d", changed.Count)
	}
	s.UpsertSlice(nodeSlice("a", 0, 0, 0))
	if after := f.claims(t, p, now).Set; after == first || after.Masks[0] != 0b111 {
		t.Fatalf("after a's slice changed the set is %s %b, want a new one with a's 3 GPUs", after.Name, after.Masks)
	}
	f.version++
	f.names = []string{"b"}
	if after := f.claims(t, p, now).Set; len(after.Masks) != 1 {
		t.Fatalf("the builder's nodes changed to [b]: set masks %b, want one node's", after.Masks)
	}
}

// TestMemoExtended: a pod asking for nvidia.com/gpu, which a DeviceClass
// maps, gets the claim kube-scheduler would make and a set of, on a node
// advertising the resource, its device-plugin GPUs, and elsewhere the
// class's devices.
func TestMemoExtended(t *testing.T) {
	f := newFixture("a", "plugin")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 0))
	class := gpuClass()
	class.Spec.ExtendedResourceName = ptr.To(string(gpunode.ResourceGPU))
	s.UpsertClass(class)
	plugin := k8sNode("plugin")
	plugin.Status.Allocatable = corev1.ResourceList{gpunode.ResourceGPU: resourceQuantity("2")}
	f.names = nil
	nodes := Nodes{Version: 1, List: func() []NodeView {
		return []NodeView{view(s, "a"), {Node: plugin, GPUs: []model.GPU{{Index: 0}, {Index: 1}}, Devs: make([]*Device, 2)}}
	}}
	p := claimPod("p")
	p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{gpunode.ResourceGPU: resourceQuantity("2")}}}}
	req := &model.Request{GPUs: 2}
	res, w := ClaimableResource(p, req)
	if w != nil || res != gpunode.ResourceGPU {
		t.Fatalf("ClaimableResource = %s, %+v; want nvidia.com/gpu", res, w)
	}
	pc, w := f.m.PodClaims(s, nodes, Pending{Pod: p, Key: "ns/p", Req: req, Extended: res}, time.Now())
	if w != nil || pc == nil || pc.ERClaim == nil || pc.ERClaim.Resource != gpunode.ResourceGPU || len(pc.Alloc) != 1 {
		t.Fatalf("claims %+v, wait %+v: want one extended-resource claim for nvidia.com/gpu", pc, w)
	}
	if r := pc.Alloc[0].Spec.Devices.Requests; len(r) != 1 || r[0].Exactly.Count != 2 || r[0].Exactly.DeviceClassName != class.Name {
		t.Fatalf("the claim's requests %+v, want 2 devices of %s", r, class.Name)
	}
	if got, ok := ExtendedResource(pc.Set.Name); !ok || got != string(gpunode.ResourceGPU) {
		t.Fatalf("set %s names resource %q", pc.Set.Name, got)
	}
	if pc.Set.Masks[0] != 0b11 || pc.Set.Masks[1] != 0b11 || pc.Set.Count != 2 {
		t.Fatalf("set masks %b count %d, want a's two claim GPUs and the plugin node's two GPUs, 2 devices", pc.Set.Masks, pc.Set.Count)
	}
	if again, _ := f.m.PodClaims(s, nodes, Pending{Pod: p, Key: "ns/p", Req: req, Extended: res}, time.Now()); again.Set != pc.Set || again.Alloc[0] != pc.Alloc[0] {
		t.Fatalf("the same pod made its claim and set again")
	}
	// On a node advertising the resource the device plugin serves it:
	// no claim is written.
	writes, err := s.AllocateChoice(context.Background(), NodeView{Node: plugin, GPUs: []model.GPU{{Index: 0}, {Index: 1}}, Devs: make([]*Device, 2)},
		[]model.GPUShare{{Index: 0}, {Index: 1}}, 0, p, pc, time.Now())
	if err != nil || writes != nil || s.InFlight() != 0 {
		t.Fatalf("on the device plugin's node: writes %+v, err %v, want none", writes, err)
	}
	writes, err = s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 0}, {Index: 1}}, 0, p, pc, time.Now())
	if err != nil || len(writes) != 1 || writes[0].ERClaim != pc.ERClaim || s.InFlight() != 1 {
		t.Fatalf("on a: writes %+v, err %v; want the extended-resource claim allocated", writes, err)
	}
	// The claim made, allocated and reserved, takes the place of the one
	// in flight under the pod's UID.
	made := allocated(pc.Alloc[0], "a", []string{"gpu-0", "gpu-1"}, p)
	made.Name, made.UID = "p-extended-resources-x", "made"
	s.UpsertClaim(made)
	if s.InFlight() != 0 || s.ClaimsOn("a") != 1 {
		t.Fatalf("the made claim shown allocated: %d in flight, %d on a; want 0 and 1", s.InFlight(), s.ClaimsOn("a"))
	}
	if again, w := f.m.PodClaims(s, nodes, Pending{Pod: p, Key: "ns/p", Req: req, Extended: res}, time.Now()); w != nil || again.Node != "a" || again.ERClaim.Created != made {
		t.Fatalf("with its claim made and allocated the pod gets %+v (wait %+v), want it pinned to a with its claim", again, w)
	}
	if key := s.erClaimByPod[p.UID]; key != "ns/p-extended-resources-x" {
		t.Fatalf("the extended-resource claim of p is %q, want the made one", key)
	}
}
