package adapter

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/dra"
)

// The claim writes against client-go's fake clientset: what reserve
// writes, release undoes, down to the finalizer; a pod joining a shared
// claim leaves its other consumers and the allocation alone.
func TestReserveAndReleaseClaims(t *testing.T) {
	ctx := context.Background()
	cl := gpuClaim("c", "gpu.gpuplane.io", 1)
	client := fake.NewClientset(cl)
	w := &apiWriter{client: client, log: klog.Background()}
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: dra.DriverName, Pool: "a", Device: "gpu-0"}}}}
	one := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "one", UID: "uid-one"}}
	two := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "two", UID: "uid-two"}}
	get := func() *resourceapi.ResourceClaim {
		got, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	first := claimWrite{claim: cl, alloc: alloc, pod: one}
	if err := w.reserveClaims(ctx, []claimWrite{first}); err != nil {
		t.Fatal(err)
	}
	got := get()
	if got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != "uid-one" || !slices.Contains(got.Finalizers, resourceapi.Finalizer) {
		t.Fatalf("after reserving: %+v, finalizers %v", got.Status, got.Finalizers)
	}
	join := claimWrite{claim: got, pod: two}
	if err := w.reserveClaims(ctx, []claimWrite{join}); err != nil {
		t.Fatal(err)
	}
	if got = get(); len(got.Status.ReservedFor) != 2 {
		t.Fatalf("after the second pod joined: %+v", got.Status.ReservedFor)
	}
	// The first pod's bind failed: it leaves, the claim stays allocated
	// for the second.
	w.releaseClaims(ctx, []claimWrite{first})
	if got = get(); got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != "uid-two" {
		t.Fatalf("after releasing the first pod: %+v", got.Status)
	}
	// The second pod's bind failed too: nothing holds the claim, whose
	// allocation was this scheduler's; it goes, and the finalizer with it.
	w.releaseClaims(ctx, []claimWrite{{claim: got, alloc: alloc, pod: two}})
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
	w.releaseClaims(ctx, []claimWrite{{claim: half, alloc: alloc, pod: one}})
	if got = get(); len(got.Finalizers) != 0 {
		t.Fatalf("finalizers %v left on a claim that was never allocated", got.Finalizers)
	}
	// A claim someone else allocated meanwhile is not taken.
	other := get()
	other.Status.Allocation = alloc
	if _, err := client.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.reserveClaims(ctx, []claimWrite{{claim: get(), alloc: alloc, pod: one}}); err == nil {
		t.Fatal("allocated a claim that is allocated already")
	}
}
