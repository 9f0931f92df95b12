package dra

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// gpuClaim is a claim in namespace ns of count devices of the class
// gpu.gpuplane.io.
func gpuClaim(name string, count int64) *resourceapi.ResourceClaim {
	x := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("claim-" + name), ResourceVersion: "1"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: x}}}}}
}

// The claim writes against client-go's fake clientset: what reserve
// writes, release undoes, down to the finalizer; a pod joining a shared
// claim leaves its other consumers and the allocation alone.
func TestReserveAndReleaseClaims(t *testing.T) {
	ctx := context.Background()
	cl := gpuClaim("c", 1)
	client := fake.NewClientset(cl)
	w := Writer{Client: client, Log: klog.Background()}
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: apidra.DriverName, Pool: "a", Device: "gpu-0"}}}}
	one := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "one", UID: "uid-one"}}
	two := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "two", UID: "uid-two"}}
	get := func() *resourceapi.ResourceClaim {
		got, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	first := ClaimWrite{Claim: cl, Alloc: alloc, Pod: one}
	if err := w.Reserve(ctx, []ClaimWrite{first}); err != nil {
		t.Fatal(err)
	}
	got := get()
	if got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != "uid-one" || !slices.Contains(got.Finalizers, resourceapi.Finalizer) {
		t.Fatalf("after reserving: %+v, finalizers %v", got.Status, got.Finalizers)
	}
	join := ClaimWrite{Claim: got, Pod: two}
	if err := w.Reserve(ctx, []ClaimWrite{join}); err != nil {
		t.Fatal(err)
	}
	if got = get(); len(got.Status.ReservedFor) != 2 {
		t.Fatalf("after the second pod joined: %+v", got.Status.ReservedFor)
	}
	// The first pod's bind failed: it leaves, the claim stays allocated
	// for the second.
	w.Release(ctx, []ClaimWrite{first})
	if got = get(); got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != "uid-two" {
		t.Fatalf("after releasing the first pod: %+v", got.Status)
	}
	// The second pod's bind failed too: nothing holds the claim, whose
	// allocation was this scheduler's; it goes, and the finalizer with it.
	w.Release(ctx, []ClaimWrite{{Claim: got, Alloc: alloc, Pod: two}})
	if got = get(); got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 || len(got.Finalizers) != 0 {
		t.Fatalf("after releasing both: %+v, finalizers %v", got.Status, got.Finalizers)
	}
	// The finalizer was written and the allocation was not: the release
	// takes the finalizer back.
	half := get()
	half.Finalizers = []string{resourceapi.Finalizer}
	if _, err := client.ResourceV1().ResourceClaims("ns").Update(ctx, half, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Release(ctx, []ClaimWrite{{Claim: half, Alloc: alloc, Pod: one}})
	if got = get(); len(got.Finalizers) != 0 {
		t.Fatalf("finalizers %v left on a claim that was never allocated", got.Finalizers)
	}
	// A claim someone else allocated meanwhile is not taken.
	other := get()
	other.Status.Allocation = alloc
	if _, err := client.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Reserve(ctx, []ClaimWrite{{Claim: get(), Alloc: alloc, Pod: one}}); err == nil {
		t.Fatal("allocated a claim that is allocated already")
	}
}

// fakeClaimClient is client-go's fake clientset that names a claim made
// with generateName, as the API server does.
func fakeClaimClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	n := 0
	client.PrependReactor("create", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cl := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
		if cl.Name == "" {
			n++
			cl.Name = cl.GenerateName + string(rune('a'+n))
			cl.UID = types.UID("uid-" + cl.Name)
		}
		return false, nil, nil
	})
	return client
}

// The extended-resource claim's writes against the fake clientset: made,
// allocated, reserved and named in the pod's status; deleted when the
// bind is undone, and when a later step fails.
func TestReserveExtendedClaim(t *testing.T) {
	ctx := context.Background()
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "container-0-request-1", Driver: apidra.DriverName, Pool: "a", Device: "gpu-0"}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p", CreationTimestamp: metav1.Unix(100, 0)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	maps := []corev1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: "nvidia.com/gpu", RequestName: "container-0-request-1"}}
	mem := gpuClaim("", 1)
	mem.Name, mem.UID, mem.GenerateName = "", "", "p-extended-resources-"
	mem.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	mem.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p", Controller: ptr.To(true)}}
	mem.Spec.Devices.Requests[0].Name = "container-0-request-1"
	tests := []struct {
		name string
		// podExists: without the pod the status patch fails.
		podExists bool
		wantErr   bool
	}{
		{name: "made, reserved, named, then deleted on release", podExists: true},
		{name: "status patch fails: no claim left", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.podExists {
				objs = append(objs, pod.DeepCopy())
			}
			client := fakeClaimClient(objs...)
			w := Writer{Client: client, Log: klog.Background()}
			erClaim := &ERClaim{Resource: "nvidia.com/gpu", Mappings: maps}
			cw := ClaimWrite{Claim: mem, Alloc: alloc, Pod: pod, ERClaim: erClaim}
			err := w.Reserve(ctx, []ClaimWrite{cw})
			list, lerr := client.ResourceV1().ResourceClaims("ns").List(ctx, metav1.ListOptions{})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("reserving succeeded without the pod")
				}
				if len(list.Items) != 0 || erClaim.Created != nil {
					t.Fatalf("claims %v left after a failed reservation", list.Items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 {
				t.Fatalf("%d claims made, want 1", len(list.Items))
			}
			got := list.Items[0]
			if got.GenerateName != "p-extended-resources-" || got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 ||
				got.Status.ReservedFor[0].UID != pod.UID || !slices.Contains(got.Finalizers, resourceapi.Finalizer) {
				t.Fatalf("claim %+v, want made, allocated, reserved for the pod, with the finalizer", got)
			}
			p, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st := p.Status.ExtendedResourceClaimStatus
			if st == nil || st.ResourceClaimName != got.Name || !slices.Equal(st.RequestMappings, maps) {
				t.Fatalf("pod status %+v, want claim %s with mappings %v", st, got.Name, maps)
			}
			// The bind failed: the claim goes.
			w.Release(ctx, []ClaimWrite{cw})
			if list, _ := client.ResourceV1().ResourceClaims("ns").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
				t.Fatalf("claims %v left after the release", list.Items)
			}
		})
	}
}
