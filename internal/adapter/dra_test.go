package adapter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	seam "github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// draNode is a node with CPU and memory and no device-plugin GPUs: its
// GPUs come from its ResourceSlice.
func draNode(name string) *corev1.Node {
	return build.Node(name).CPU("64").Memory("256Gi").Obj()
}

// gpuSlice is the ResourceSlice of gpus GPUs gpuplane's driver publishes
// for a node.
func gpuSlice(node string, gpus int, product string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	for i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprint("gpu-", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				dra.AttrType:        {StringValue: ptr.To(dra.TypeGPU)},
				dra.AttrIndex:       {IntValue: ptr.To(int64(i))},
				dra.AttrProductName: {StringValue: ptr.To(product)},
				dra.AttrUUID:        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{dra.CapacityMemory: {Value: resource.MustParse("80Gi")}},
		})
	}
	return s
}

func gpuClass(name string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", dra.DriverName)}}}}}
}

func gpuClaim(name, class string, count int64, selectors ...string) *resourceapi.ResourceClaim {
	x := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	for _, s := range selectors {
		x.Selectors = append(x.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("claim-" + name), ResourceVersion: "1"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: x}}}}}
}

// claimPod is a pod of ours that names a claim.
func claimPod(name, claim string) *corev1.Pod {
	return newPod("ns", name).Limit("cpu", "1").UID("uid-"+name).Claim("gpu", claim).Obj()
}

// claimWrites returns what the fake writer was asked to write to claims:
// "claim pod node devices" (devices "-" when the pod only joins).
func (f *fakeWriter) claimLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.claims)
}

func newDRAFixture(t *testing.T, nodes map[string]int) *loopFixture {
	t.Helper()
	var objs []*corev1.Node
	for n := range nodes {
		objs = append(objs, draNode(n))
	}
	f := newLoopFixture(t, Config{}, objs...)
	for n, gpus := range nodes {
		f.cache.upsertSlice(gpuSlice(n, gpus, "H100"))
	}
	f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
	return f
}

// applyClaims plays the informer: the claims the fake writer wrote come
// back allocated and reserved, and the pods bound.
func (f *loopFixture) applyClaims() {
	f.api.mu.Lock()
	writes := slices.Clone(f.api.claimWrites)
	binds := slices.Clone(f.api.binds)
	f.api.mu.Unlock()
	for _, w := range writes {
		f.cache.mu.Lock()
		cl := f.cache.dra.Claim(claimKey(w.Claim)).DeepCopy()
		f.cache.mu.Unlock()
		if w.Alloc != nil {
			cl.Status.Allocation = w.Alloc
		}
		if !slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == w.Pod.UID }) {
			cl.Status.ReservedFor = append(cl.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: w.Pod.Name, UID: w.Pod.UID})
		}
		f.cache.upsertClaim(cl)
	}
	for _, b := range binds {
		parts := strings.Fields(b)
		f.cache.mu.Lock()
		pi := f.cache.pods[parts[0]]
		f.cache.mu.Unlock()
		if pi != nil && pi.pod.Spec.NodeName == "" {
			p := pi.pod.DeepCopy()
			p.Spec.NodeName = parts[1]
			f.cache.upsertPod(p)
		}
	}
}

func TestDRAClaimsGetDistinctDevices(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 8})
	for i := range 9 {
		name := fmt.Sprint("p", i)
		f.cache.upsertClaim(gpuClaim(name, "gpu.gpuplane.io", 1))
		f.cache.upsertPod(claimPod(name, name))
	}
	f.cycle()
	f.applyClaims()
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 8 {
		t.Fatalf("claim writes %v, want 8 (one node of 8 GPUs)", log)
	}
	seen := map[string]bool{}
	for _, l := range log {
		dev := strings.Fields(l)[3]
		if seen[dev] {
			t.Errorf("device %s allocated twice: %v", dev, log)
		}
		seen[dev] = true
	}
	if len(f.api.binds) != 8 {
		t.Errorf("binds %v, want 8", f.api.binds)
	}
	if got := f.status.conditions["ns/p8"]; !strings.Contains(got, "insufficient free devices for the claims") {
		t.Errorf("the ninth pod says %q, want that the claims' devices are taken", got)
	}
}

func TestDRAInFlightAllocationsHoldDevices(t *testing.T) {
	// Without applying the writes (the informer lags), a second cycle
	// must not hand the in-flight devices out again.
	f := newDRAFixture(t, map[string]int{"a": 2})
	f.cache.upsertClaim(gpuClaim("c0", "gpu.gpuplane.io", 2))
	f.cache.upsertPod(claimPod("p0", "c0"))
	f.cycle()
	f.cache.upsertClaim(gpuClaim("c1", "gpu.gpuplane.io", 1))
	f.cache.upsertPod(claimPod("p1", "c1"))
	f.cycle()
	if log := f.api.claimLog(); len(log) != 1 {
		t.Fatalf("claim writes %v, want only p0's: its devices are in flight", log)
	}
}

func TestDRAGangClaimsAllOrNothing(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 8, "b": 4})
	f.cache.upsertPodGroup(podGroup("g", 3))
	for i := range 3 {
		name := fmt.Sprint("g", i)
		f.cache.upsertClaim(gpuClaim(name, "gpu.gpuplane.io", 4))
		p := claimPod(name, name)
		p.Labels[v1alpha1.PodGroupLabel] = "g"
		f.cache.upsertPod(p)
	}
	f.cycle()
	if len(f.api.claimLog()) != 3 || len(f.api.binds) != 3 {
		t.Fatalf("claims %v binds %v, want the 3-pod gang's 12 GPUs over both nodes", f.api.claimLog(), f.api.binds)
	}
	// A second gang that needs more than is left gets nothing at all.
	f2 := newDRAFixture(t, map[string]int{"a": 8})
	f2.cache.upsertPodGroup(podGroup("big", 3))
	for i := range 3 {
		name := fmt.Sprint("big", i)
		f2.cache.upsertClaim(gpuClaim(name, "gpu.gpuplane.io", 4))
		p := claimPod(name, name)
		p.Labels[v1alpha1.PodGroupLabel] = "big"
		f2.cache.upsertPod(p)
	}
	f2.cycle()
	if len(f2.api.claimLog()) != 0 || len(f2.api.binds) != 0 {
		t.Fatalf("claims %v binds %v, want none: the gang does not fit whole", f2.api.claimLog(), f2.api.binds)
	}
	f2.cache.mu.Lock()
	inflight := f2.cache.dra.InFlight()
	f2.cache.mu.Unlock()
	if inflight != 0 {
		t.Errorf("%d claims in flight for a gang that was not placed", inflight)
	}
}

func TestDRAPrefersPartlyUsedNodes(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 8, "b": 8})
	f.cache.upsertClaim(gpuClaim("first", "gpu.gpuplane.io", 4))
	f.cache.upsertPod(claimPod("first", "first"))
	f.cycle()
	f.applyClaims()
	first := strings.Fields(f.api.claimLog()[0])[2]
	f.cache.upsertClaim(gpuClaim("second", "gpu.gpuplane.io", 2))
	f.cache.upsertPod(claimPod("second", "second"))
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 2 || strings.Fields(log[1])[2] != first {
		t.Fatalf("claim writes %v, want the second claim on %s, the node already in use", log, first)
	}
}

func TestDRASharedClaimJoinsItsNode(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 8, "b": 8})
	f.cache.upsertClaim(gpuClaim("shared", "gpu.gpuplane.io", 1))
	f.cache.upsertPod(claimPod("one", "shared"))
	f.cycle()
	f.applyClaims()
	node := strings.Fields(f.api.claimLog()[0])[2]
	f.cache.upsertPod(claimPod("two", "shared"))
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 2 || log[1] != "ns/shared ns/two "+node+" -" {
		t.Fatalf("claim writes %v, want pod two added to the shared claim on %s without a new allocation", log, node)
	}
	if !slices.Contains(f.api.binds, "ns/two "+node+" ") {
		t.Errorf("binds %v, want pod two on %s", f.api.binds, node)
	}
}

func TestDRABadClaimsWaitWithAReason(t *testing.T) {
	tests := []struct {
		name, class string
		selectors   []string
		want        string
	}{
		{name: "missing class", class: "nope", want: `DeviceClassNotFound: pod ns/p: ResourceClaim ns/c: spec.devices.requests[0] ("gpu").exactly.deviceClassName: DeviceClass "nope" does not exist`},
		{name: "unknown attribute", class: "gpu.gpuplane.io", selectors: []string{`device.attributes["gpu.gpuplane.io"].nosuch == "x"`},
			want: `SelectorFailed: pod ns/p: ResourceClaim ns/c: spec.devices.requests[0] ("gpu").exactly.selectors[0]`},
		{name: "syntax error", class: "gpu.gpuplane.io", selectors: []string{`device.attributes[`}, want: "InvalidSelector: pod ns/p: ResourceClaim ns/c"},
		{name: "no device matches", class: "gpu.gpuplane.io", selectors: []string{`device.attributes["gpu.gpuplane.io"].productName == "B200"`},
			want: "no device satisfies the claims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newDRAFixture(t, map[string]int{"a": 8})
			f.cache.upsertClaim(gpuClaim("c", tc.class, 1, tc.selectors...))
			f.cache.upsertPod(claimPod("p", "c"))
			f.cycle()
			if len(f.api.binds) != 0 || len(f.api.claimLog()) != 0 {
				t.Fatalf("bound %v, wrote %v for a claim that cannot be allocated", f.api.binds, f.api.claimLog())
			}
			if got := f.status.conditions["ns/p"]; !strings.Contains(got, tc.want) {
				t.Errorf("the pod says %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDRAFailedBindReleasesDevices(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 1})
	f.cache.upsertClaim(gpuClaim("c", "gpu.gpuplane.io", 1))
	f.cache.upsertPod(claimPod("p", "c"))
	f.api.bindFail = fmt.Errorf("node went away")
	f.cycle()
	f.cache.mu.Lock()
	inflight, assumed := f.cache.dra.InFlight(), len(f.cache.assumed)
	f.cache.mu.Unlock()
	if inflight != 0 || assumed != 0 {
		t.Fatalf("%d claims in flight and %d binds assumed after the bind failed, want none", inflight, assumed)
	}
	f.api.bindFail = nil
	f.cycle()
	if log := f.api.claimLog(); len(log) != 2 || log[0] != log[1] {
		t.Fatalf("claim writes %v, want the same device allocated again after the failure", log)
	}
}

func TestDRADevicePluginAndClaimsShareOneLedger(t *testing.T) {
	// A node whose device plugin advertises 2 GPUs and whose slice
	// publishes the same 2: a claim and a device-plugin pod never get the
	// same GPU.
	f := newLoopFixture(t, Config{}, gpuNode("a", 2))
	f.cache.upsertSlice(gpuSlice("a", 2, "H100"))
	f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
	f.cache.upsertPod(newPod("ns", "dp").GPUs(1).Obj())
	f.cycle()
	f.applyClaims()
	f.cache.upsertClaim(gpuClaim("c", "gpu.gpuplane.io", 2))
	f.cache.upsertPod(claimPod("p", "c"))
	f.cycle()
	if log := f.api.claimLog(); len(log) != 0 {
		t.Fatalf("claim writes %v, want none: one of the two GPUs is the device-plugin pod's", log)
	}
	_ = context.Background()
}

func TestDRAClaimKeepsNVLinkIslandsWhole(t *testing.T) {
	n := draNode("a")
	n.Annotations = map[string]string{gpunode.TopologyAnnotation: `{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3],"nvlinks":12},{"gpus":[4,5,6,7],"nvlinks":12}]}`}
	f := newLoopFixture(t, Config{}, n)
	f.cache.upsertSlice(gpuSlice("a", 8, "H100"))
	f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
	// gpu-0 is held by a claim allocated elsewhere (no pod of ours).
	held := gpuClaim("held", "gpu.gpuplane.io", 1)
	held.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "a", Device: "gpu-0"}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}
	f.cache.upsertClaim(held)
	f.cache.upsertClaim(gpuClaim("four", "gpu.gpuplane.io", 4))
	f.cache.upsertPod(claimPod("four", "four"))
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 1 || strings.Fields(log[0])[3] != "a/gpu-4,a/gpu-5,a/gpu-6,a/gpu-7" {
		t.Fatalf("claim writes %v, want the four GPUs of the free NVLink island", log)
	}
	f.status.mu.Lock()
	defer f.status.mu.Unlock()
	for _, e := range f.status.events {
		if strings.Contains(e, "GPUTopologyIgnored") {
			t.Errorf("the topology that describes the slice's GPUs was reported ignored: %s", e)
		}
	}
}

func TestDRATwoNewPodsOfOneClaim(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 8, "b": 8})
	f.cache.upsertClaim(gpuClaim("shared", "gpu.gpuplane.io", 2))
	f.cache.upsertPod(claimPod("one", "shared"))
	f.cache.upsertPod(claimPod("two", "shared"))
	f.cycle()
	if log := f.api.claimLog(); len(log) != 1 {
		t.Fatalf("claim writes %v, want one allocation: the claim is allocated once", log)
	}
	f.applyClaims()
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 2 || !strings.HasSuffix(log[1], " -") || strings.Fields(log[1])[2] != strings.Fields(log[0])[2] {
		t.Fatalf("claim writes %v, want the second pod joining the claim on its node", log)
	}
}

// claimKey names a claim as the DRA state keys it (namespace/name).
func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// allocationNode is the node an allocation names (seam.AllocationNode).
func allocationNode(a *resourceapi.AllocationResult) string { return seam.AllocationNode(a) }
