package adapter

import (
	"context"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/dra"
)

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
		{Request: "container-0-request-1", Driver: dra.DriverName, Pool: "a", Device: "gpu-0"}}}}
	pod := erPod("p", "1")
	reqs, maps := extendedRequests(pod, ResourceGPU, "gpu.gpuplane.io")
	mem := erClaimFor(pod, reqs)
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
			w := &apiWriter{client: client, log: klog.Background()}
			erClaim := &extendedResourceClaim{resource: ResourceGPU, mappings: maps}
			cw := claimWrite{claim: mem, alloc: alloc, pod: pod, erClaim: erClaim}
			err := w.reserveClaims(ctx, []claimWrite{cw})
			list, lerr := client.ResourceV1().ResourceClaims("ns").List(ctx, metav1.ListOptions{})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("reserving succeeded without the pod")
				}
				if len(list.Items) != 0 || erClaim.created != nil {
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
			w.releaseClaims(ctx, []claimWrite{cw})
			if list, _ := client.ResourceV1().ResourceClaims("ns").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
				t.Fatalf("claims %v left after the release", list.Items)
			}
		})
	}
}
