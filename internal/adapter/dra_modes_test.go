package adapter

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// modeClaim is a claim of one request.
func modeClaim(name string, r resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	cl := gpuClaim(name, "gpu.gpuplane.io", 1)
	cl.Spec.Devices.Requests = []resourceapi.DeviceRequest{r}
	return cl
}

// lastWrite is the fake writer's last claim write: the claim, the node
// and the results as request=device.
func (f *loopFixture) lastWrite(t *testing.T) (string, string, []string) {
	t.Helper()
	f.api.mu.Lock()
	defer f.api.mu.Unlock()
	if len(f.api.claimWrites) == 0 {
		t.Fatal("no claim written")
	}
	w := f.api.claimWrites[len(f.api.claimWrites)-1]
	var res []string
	for _, r := range w.Alloc.Devices.Results {
		res = append(res, r.Request+"="+r.Device)
	}
	return claimKey(w.Claim), allocationNode(w.Alloc), res
}

// TestDRAAllocationModes: through the adapter, the core and the binder, a
// claim for all the GPUs that match gets every GPU of the one node where
// all are free, a claim with firstAvailable subrequests the first that
// fits, named request/subrequest, and a second claim for all waits.
func TestDRAAllocationModes(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 2, "b": 4})
	f.cache.upsertSlice(gpuSlice("b", 4, "A100"))
	all := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
		AllocationMode: resourceapi.DeviceAllocationModeAll}}
	// u takes one GPU of b, the only node of A100s.
	f.cache.upsertClaim(gpuClaim("u", "gpu.gpuplane.io", 1, `device.attributes["gpu.gpuplane.io"].productName == "A100"`))
	f.cache.upsertPod(claimPod("u", "u"))
	f.cycle()
	f.applyClaims()
	if claim, node, _ := f.lastWrite(t); claim != "ns/u" || node != "b" {
		t.Fatalf("claim %s written on %s, want u on b", claim, node)
	}

	// All of b is no longer free: all of a's two.
	f.cache.upsertClaim(modeClaim("all", all))
	f.cache.upsertPod(claimPod("all", "all"))
	f.cycle()
	f.applyClaims()
	if claim, node, res := f.lastWrite(t); claim != "ns/all" || node != "a" || !slices.Equal(res, []string{"gpu=gpu-0", "gpu=gpu-1"}) {
		t.Fatalf("claim %s written on %s with %v, want all on a with both its GPUs", claim, node, res)
	}

	// Four GPUs are free nowhere: one of b's.
	f.cache.upsertClaim(modeClaim("first", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "four", DeviceClassName: "gpu.gpuplane.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "one", DeviceClassName: "gpu.gpuplane.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}))
	f.cache.upsertPod(claimPod("first", "first"))
	f.cycle()
	f.applyClaims()
	if claim, node, res := f.lastWrite(t); claim != "ns/first" || node != "b" || len(res) != 1 || !strings.HasPrefix(res[0], "gpu/one=") {
		t.Fatalf("claim %s written on %s with %v, want first on b with one GPU for gpu/one", claim, node, res)
	}

	// Every node has a GPU taken: another claim for all waits.
	f.cache.upsertClaim(modeClaim("late", all))
	f.cache.upsertPod(claimPod("late", "late"))
	f.cycle()
	if claim, _, _ := f.lastWrite(t); claim == "ns/late" {
		t.Fatal("the late claim for all GPUs was allocated")
	}
	if got := f.status.conditions["ns/late"]; !strings.Contains(got, "insufficient free devices for the claims") {
		t.Errorf("the late pod says %q, want that the claims' devices are taken", got)
	}
}

// A pod's firstAvailable alternatives are the whole pod but for its GPUs:
// each keeps the node selector (and the rest) the pod's spec gives it, so
// that no alternative places it where the pod may not go. And an
// allocated claim no pod holds takes its devices but no slot of the
// node's pod limit.
func TestFirstAvailableKeepsThePodsConstraints(t *testing.T) {
	class := gpuClass("gpu.gpuplane.io")
	first := modeClaim("first", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "two", DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
		{Name: "one", DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}})
	pod := newPod("ns", "p").Limit("cpu", "1").UID("uid-p").Claim("gpu", "first").NodeSelector(corev1.LabelTopologyZone, "z2").Obj()
	held := func(node string) *resourceapi.ResourceClaim {
		cl := gpuClaim("held-"+node, class.Name, 1)
		cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: dra.DriverName, Pool: node, Device: "gpu-0"}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
		return cl
	}
	node := func(name, zone, pods string) *corev1.Node {
		return build.Node(name).Resources(rl("cpu", "64", "memory", "256Gi", "pods", pods)).Label(corev1.LabelTopologyZone, zone).Obj()
	}
	objs := []runtime.Object{class, first, pod,
		// a: in the wrong zone.
		node("a", "z1", "110"), gpuSlice("a", 2, "H100"),
		// c: one GPU held by a claim no pod holds, one free.
		node("c", "z2", "110"), gpuSlice("c", 2, "H100"), held("c"),
		// d: the same, and its one pod slot taken by a running pod (the
		// claim takes none, so the pod is counted).
		node("d", "z2", "1"), gpuSlice("d", 2, "H100"), held("d"), newPod("ns", "runs").NodeName("d").Obj()}
	v, err := ViewOf(v1alpha1.SchedulerName, objs, time.Unix(200, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Snapshot.Pending) != 1 {
		t.Fatalf("pending %+v, held %v", v.Snapshot.Pending, v.Held)
	}
	req := &v.Snapshot.Pending[0].Pods[0].Request
	if len(req.FirstOf) != 2 || len(req.NodeSelector) == 0 {
		t.Fatalf("request %+v: want two alternatives and a node selector", req)
	}
	st := placement.NewState(v.Snapshot.Nodes)
	for i := range v.Snapshot.RunningByNode {
		for _, a := range v.Snapshot.RunningByNode[i] {
			if err := st.Hold(i, &a.Request, a.GPUs); err != nil {
				t.Fatalf("holding %s: %v", a.Pod, err)
			}
		}
	}
	for k := range req.FirstOf {
		alt := &req.FirstOf[k]
		if !maps.Equal(alt.NodeSelector, req.NodeSelector) {
			t.Errorf("alternative %d selects %v, the pod %v", k, alt.NodeSelector, req.NodeSelector)
		}
		for i, n := range v.Snapshot.Nodes {
			want := n.Name == "c" && k == 1
			if got := st.Why(i, alt) == ""; got != want {
				t.Errorf("alternative %d on %s: takes it %v (%q), want %v", k, n.Name, got, st.Why(i, alt), want)
			}
		}
	}
}
