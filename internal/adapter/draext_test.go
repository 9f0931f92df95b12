package adapter

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// mappedClass is gpuClass mapping nvidia.com/gpu (spec.extendedResourceName).
func mappedClass(name string) *resourceapi.DeviceClass {
	dc := gpuClass(name)
	dc.Spec.ExtendedResourceName = ptr.To(string(ResourceGPU))
	return dc
}

// erPod is a pod of ours asking for gpus nvidia.com/gpu and no claim.
func erPod(name, gpus string) *corev1.Pod {
	return newPod("ns", name).Limits(rl("cpu", "1", "nvidia.com/gpu", gpus)).UID("uid-" + name).Obj()
}

func TestExtendedResourcePlacement(t *testing.T) {
	tests := []struct {
		name string
		// dra and dp are the DRA-only nodes (GPUs from slices) and the
		// device-plugin nodes (nvidia.com/gpu in allocatable), with GPUs.
		dra, dp map[string]int
		mapped  bool
		// broken gives the class a selector that fails on the devices.
		broken bool
		gpus   string
		// wantClaim is "node devices" of the claim written, "" for none.
		wantClaim string
		wantBind  string
		// wantWhy is in the waiting pod's condition.
		wantWhy string
	}{
		{name: "DRA-only node gets a claim", dra: map[string]int{"a": 4}, mapped: true, gpus: "2",
			wantClaim: "a a/gpu-0,a/gpu-1", wantBind: "ns/p a 0,1"},
		{name: "device-plugin node binds without a claim", dp: map[string]int{"b": 4}, mapped: true, gpus: "2",
			wantBind: "ns/p b 0,1"},
		{name: "unmapped resource never goes to a DRA-only node", dra: map[string]int{"a": 4}, gpus: "2"},
		{name: "too many for the DRA-only node", dra: map[string]int{"a": 4}, mapped: true, gpus: "5",
			wantWhy: "insufficient nvidia.com/gpu"},
		{name: "a class whose selector fails leaves the device plugin", dra: map[string]int{"a": 4}, dp: map[string]int{"b": 4}, mapped: true, broken: true, gpus: "2",
			wantBind: "ns/p b 0,1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*corev1.Node
			for n := range tc.dra {
				nodes = append(nodes, draNode(n))
			}
			for n, g := range tc.dp {
				nodes = append(nodes, gpuNode(n, g))
			}
			f := newLoopFixture(t, Config{}, nodes...)
			for n, g := range tc.dra {
				f.cache.upsertSlice(gpuSlice(n, g, "H100"))
			}
			if tc.mapped {
				dc := mappedClass("gpu.gpuplane.io")
				if tc.broken {
					dc.Spec.Selectors = append(dc.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
						Expression: `device.attributes["gpu.gpuplane.io"].nosuch == "x"`}})
				}
				f.cache.upsertClass(dc)
			} else {
				f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
			}
			f.cache.upsertPod(erPod("p", tc.gpus))
			f.cycle()
			var claims []string
			for _, w := range f.api.claimWrites {
				var devs []string
				for _, r := range w.Alloc.Devices.Results {
					devs = append(devs, r.Pool+"/"+r.Device)
				}
				claims = append(claims, allocationNode(w.Alloc)+" "+strings.Join(devs, ","))
				if w.ERClaim == nil {
					t.Errorf("claim write %s is not marked as the pod's extended-resource claim", claimKey(w.Claim))
					continue
				}
				want := []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: "nvidia.com/gpu", RequestName: "container-0-request-1"}}
				if !slices.Equal(w.ERClaim.Mappings, want) {
					t.Errorf("mappings %v, want %v", w.ERClaim.Mappings, want)
				}
				cl := w.Claim
				if cl.GenerateName != "p-extended-resources-" || cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" ||
					len(cl.OwnerReferences) != 1 || cl.OwnerReferences[0].UID != "uid-p" || !*cl.OwnerReferences[0].Controller {
					t.Errorf("claim meta %+v, want kube-scheduler's extended-resource claim of pod p", cl.ObjectMeta)
				}
				if r := cl.Spec.Devices.Requests; len(r) != 1 || r[0].Name != "container-0-request-1" || r[0].Exactly.DeviceClassName != "gpu.gpuplane.io" || r[0].Exactly.Count != 2 {
					t.Errorf("claim requests %+v, want one of 2 devices of gpu.gpuplane.io named container-0-request-1", r)
				}
			}
			wantClaims := []string(nil)
			if tc.wantClaim != "" {
				wantClaims = []string{tc.wantClaim}
			}
			if !slices.Equal(claims, wantClaims) {
				t.Errorf("claims %v, want %v", claims, wantClaims)
			}
			wantBinds := []string(nil)
			if tc.wantBind != "" {
				wantBinds = []string{tc.wantBind}
			}
			if !slices.Equal(f.api.binds, wantBinds) {
				t.Errorf("binds %v, want %v", f.api.binds, wantBinds)
			}
			if got := f.status.conditions["ns/p"]; tc.wantWhy != "" && !strings.Contains(got, tc.wantWhy) {
				t.Errorf("why the pod waits: %q, want %q (the resource it asked for, not a claim)", got, tc.wantWhy)
			}
		})
	}
}

// TestExtendedResourceClaimsHoldDevices checks that a claim made for a
// pod's extended resources holds its devices: in flight, and once the
// informer shows it allocated for the bound pod, which names no claim.
func TestExtendedResourceClaimsHoldDevices(t *testing.T) {
	f := newLoopFixture(t, Config{}, draNode("a"))
	f.cache.upsertSlice(gpuSlice("a", 4, "H100"))
	f.cache.upsertClass(mappedClass("gpu.gpuplane.io"))
	f.cache.upsertPod(erPod("p0", "3"))
	f.cycle()
	f.cache.upsertPod(erPod("p1", "2"))
	f.cycle()
	if len(f.api.claimWrites) != 1 {
		t.Fatalf("claim writes %v, want only p0's: its devices are in flight", f.api.claims)
	}
	// The informer: the claim made, allocated and reserved, the pod bound
	// with its status naming the claim.
	w := f.api.claimWrites[0]
	cl := w.Claim.DeepCopy()
	cl.Name, cl.UID = "p0-extended-resources-x1", "claim-uid"
	cl.Finalizers = []string{resourceapi.Finalizer}
	// Not the lowest GPUs, so that only the claim says which it holds.
	cl.Status.Allocation = w.Alloc.DeepCopy()
	for i := range cl.Status.Allocation.Devices.Results {
		cl.Status.Allocation.Devices.Results[i].Device = fmt.Sprint("gpu-", i+1)
	}
	cl.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p0", UID: "uid-p0"}}
	f.cache.upsertClaim(cl)
	f.cache.mu.Lock()
	inflight := f.cache.dra.InFlight()
	f.cache.mu.Unlock()
	if inflight != 0 {
		t.Errorf("%d allocations still in flight once the informer shows the claim", inflight)
	}
	p := erPod("p0", "3")
	p.Spec.NodeName = "a"
	p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: cl.Name, RequestMappings: w.ERClaim.Mappings}
	f.cache.upsertPod(p)
	// The loop's own builder: another one would take the cache's marks of
	// the nodes that changed, and the loop's would keep p0 on GPUs 0-2.
	in := f.cache.snapshot(f.loop.build, newRefusals(), f.now)
	var got []int
	for _, a := range in.snap.RunningByNode[0] {
		if a.Pod == "ns/p0" {
			for _, g := range a.GPUs {
				got = append(got, g.Index)
			}
		}
	}
	if !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("p0 holds GPUs %v in the snapshot, want its claim's 1,2,3", got)
	}
	f.cycle()
	if len(f.api.claimWrites) != 1 {
		t.Fatalf("claim writes %v, want none for p1: p0's claim holds 3 of the node's 4 GPUs", f.api.claims)
	}
	// A pod of one GPU gets the one the claim does not hold.
	f.cache.upsertPod(erPod("p2", "1"))
	f.cycle()
	if len(f.api.claimWrites) != 2 {
		t.Fatalf("claim writes %v, want p2's; events %v", f.api.claims, f.status.events)
	}
	held := map[string]bool{}
	for _, r := range cl.Status.Allocation.Devices.Results {
		held[r.Device] = true
	}
	if d := f.api.claimWrites[1].Alloc.Devices.Results[0].Device; held[d] {
		t.Errorf("p2 got %s, which p0's claim holds", d)
	}
}

// TestExtendedResourceClaimFoundAgain checks that a claim made for the pod
// before (a scheduler that stopped before binding it) is the pod's claim,
// not a second one: allocated, it pins the pod to its node.
func TestExtendedResourceClaimFoundAgain(t *testing.T) {
	f := newLoopFixture(t, Config{}, draNode("a"), draNode("b"))
	f.cache.upsertSlice(gpuSlice("a", 4, "H100"))
	f.cache.upsertSlice(gpuSlice("b", 4, "H100"))
	f.cache.upsertClass(mappedClass("gpu.gpuplane.io"))
	p := erPod("p", "2")
	// The claim kube-scheduler's DRAExtendedResource contract makes.
	cl := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "p-extended-resources-x1", UID: "claim-uid", ResourceVersion: "1",
			GenerateName: "p-extended-resources-", Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "container-0-request-1",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}}}}},
	}
	cl.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "container-0-request-1", Driver: "gpu.gpuplane.io", Pool: "b", Device: "gpu-2"},
			{Request: "container-0-request-1", Driver: "gpu.gpuplane.io", Pool: "b", Device: "gpu-3"}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}}},
	}
	f.cache.upsertClaim(cl)
	f.cache.upsertPod(p)
	f.cycle()
	if want := []string{"ns/p-extended-resources-x1 ns/p b -"}; !slices.Equal(f.api.claims, want) {
		t.Fatalf("claim writes %v, want %v: the pod joins its claim on its node", f.api.claims, want)
	}
	if len(f.api.claimWrites) != 1 || f.api.claimWrites[0].ERClaim == nil || f.api.claimWrites[0].ERClaim.Created != cl {
		t.Errorf("the write does not carry the existing claim as the pod's extended-resource claim")
	}
	if len(f.api.binds) != 1 || !strings.HasPrefix(f.api.binds[0], "ns/p b") {
		t.Errorf("binds %v, want p on b", f.api.binds)
	}
}

// migERClass is the agent's class of one MIG profile, mapping
// nvidia.com/mig-<profile> (internal/dra.DeviceClasses).
func migERClass(profile string) *resourceapi.DeviceClass {
	c := typeClass("mig-"+profile+".gpu.gpuplane.io", "mig")
	c.Spec.Selectors[0].CEL.Expression += fmt.Sprintf(" && device.attributes[%q].profile == %q", "gpu.gpuplane.io", profile)
	c.Spec.ExtendedResourceName = ptr.To(migResourcePrefix + profile)
	return c
}

// TestExtendedMIGResource: a pod asking for nvidia.com/mig-<profile> on a
// node whose MIG devices only DRA publishes gets a claim for one device of
// the profile's class; a profile no class maps, or a class of another
// profile, leaves the pod waiting with the resource named.
func TestExtendedMIGResource(t *testing.T) {
	tests := []struct {
		name    string
		classes []string
		ask     string
		// wantDevice is the prefix of the device the claim gets, "" for
		// no claim.
		wantDevice string
		wantWhy    string
	}{
		{name: "mapped profile", classes: []string{"1g.10gb"}, ask: "1g.10gb", wantDevice: "gpu-0-mig-1g-10gb-"},
		{name: "larger profile", classes: []string{"1g.10gb", "3g.40gb"}, ask: "3g.40gb", wantDevice: "gpu-0-mig-3g-40gb-"},
		{name: "no class maps the profile", classes: []string{"1g.10gb"}, ask: "2g.20gb", wantWhy: "nvidia.com/mig-2g.20gb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMIGFixture(t, 1)
			for _, p := range tc.classes {
				f.cache.upsertClass(migERClass(p))
			}
			p := newPod("ns", "p").Limits(rl("cpu", "1", migResourcePrefix+tc.ask, "1")).UID("uid-p").Obj()
			f.cache.upsertPod(p)
			f.cycle()
			if tc.wantDevice == "" {
				if len(f.api.claimWrites) != 0 || len(f.api.binds) != 0 {
					t.Fatalf("claims %v, binds %v, want none", f.api.claims, f.api.binds)
				}
				if got := f.status.conditions["ns/p"]; !strings.Contains(got, tc.wantWhy) {
					t.Errorf("why the pod waits: %q, want it to name %s", got, tc.wantWhy)
				}
				return
			}
			if len(f.api.claimWrites) != 1 {
				t.Fatalf("claim writes %v, want the pod's extended-resource claim", f.api.claims)
			}
			w := f.api.claimWrites[0]
			res := w.Alloc.Devices.Results
			if len(res) != 1 || !strings.HasPrefix(res[0].Device, tc.wantDevice) {
				t.Errorf("the claim got %+v, want one device %s*", res, tc.wantDevice)
			}
			if w.ERClaim == nil || w.ERClaim.Resource != corev1.ResourceName(migResourcePrefix+tc.ask) {
				t.Errorf("the write is not the pod's claim for %s: %+v", migResourcePrefix+tc.ask, w.ERClaim)
			}
			if r := w.Claim.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly.DeviceClassName != "mig-"+tc.ask+".gpu.gpuplane.io" || r[0].Exactly.Count != 1 {
				t.Errorf("claim requests %+v, want one device of the profile's class", r)
			}
			if len(f.api.binds) != 1 || !strings.HasPrefix(f.api.binds[0], "ns/p a") {
				t.Errorf("binds %v, want p on a", f.api.binds)
			}
		})
	}
}

// TestImpliedClassResource: every DeviceClass implies the resource
// deviceclass.resource.kubernetes.io/<class>, which no device plugin
// serves: a pod asking for it gets a claim of the class wherever it goes,
// and waits with the reason when the class is missing or the request is
// mixed with GPUs asked another way.
func TestImpliedClassResource(t *testing.T) {
	implied := func(class string) string { return resourceapi.ResourceDeviceClassPrefix + class }
	tests := []struct {
		name      string
		ask       corev1.ResourceList
		wantCount int64
		wantWhy   string
	}{
		{name: "two GPUs of the class", ask: rl("cpu", "1", implied("gpu.gpuplane.io"), "2"), wantCount: 2},
		{name: "a class that does not exist", ask: rl("cpu", "1", implied("nosuch"), "1"), wantWhy: `DeviceClass "nosuch" does not exist`},
		{name: "beside nvidia.com/gpu", ask: rl("cpu", "1", implied("gpu.gpuplane.io"), "1", "nvidia.com/gpu", "1"), wantWhy: "besides other GPUs"},
		{name: "two classes", ask: rl("cpu", "1", implied("gpu.gpuplane.io"), "1", implied("other"), "1"), wantWhy: "one DeviceClass's resource per pod"},
		{name: "more than a node has", ask: rl("cpu", "1", implied("gpu.gpuplane.io"), "5"), wantWhy: "insufficient " + implied("gpu.gpuplane.io")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, draNode("a"), gpuNode("b", 8))
			f.cache.upsertSlice(gpuSlice("a", 4, "H100"))
			f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
			f.cache.upsertClass(gpuClass("other"))
			p := newPod("ns", "p").Limits(tc.ask).UID("uid-p").Obj()
			f.cache.upsertPod(p)
			f.cycle()
			if tc.wantWhy != "" {
				if len(f.api.claimWrites) != 0 || len(f.api.binds) != 0 {
					t.Fatalf("claims %v, binds %v, want none", f.api.claims, f.api.binds)
				}
				if got := f.status.conditions["ns/p"]; !strings.Contains(got, tc.wantWhy) {
					t.Errorf("why the pod waits: %q, want %q", got, tc.wantWhy)
				}
				return
			}
			if len(f.api.claimWrites) != 1 {
				t.Fatalf("claim writes %v, want the pod's claim (node b's device plugin does not serve %s)", f.api.claims, implied("gpu.gpuplane.io"))
			}
			w := f.api.claimWrites[0]
			if r := w.Claim.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly.DeviceClassName != "gpu.gpuplane.io" || r[0].Exactly.Count != tc.wantCount {
				t.Errorf("claim requests %+v, want %d devices of gpu.gpuplane.io", r, tc.wantCount)
			}
			want := []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: implied("gpu.gpuplane.io"), RequestName: "container-0-request-1"}}
			if w.ERClaim == nil || !slices.Equal(w.ERClaim.Mappings, want) {
				t.Errorf("the write's mappings %+v, want %v", w.ERClaim, want)
			}
			if len(w.Alloc.Devices.Results) != int(tc.wantCount) || allocationNode(w.Alloc) != "a" {
				t.Errorf("allocation %+v, want %d devices of node a", w.Alloc.Devices.Results, tc.wantCount)
			}
			if len(f.api.binds) != 1 || !strings.HasPrefix(f.api.binds[0], "ns/p a") {
				t.Errorf("binds %v, want p on a", f.api.binds)
			}
		})
	}
}
