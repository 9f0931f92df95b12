package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// createClaim creates a claim of the test's namespace with one request.
func (c *draCluster) createClaim(name string, r resourceapi.DeviceRequest) {
	c.t.Helper()
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}}}
	if _, err := env.Client.ResourceV1().ResourceClaims(c.ns).Create(c.t.Context(), cl, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

// oracleClasses serves kube-scheduler's allocator the cluster's classes.
type oracleClasses struct{}

func (oracleClasses) List() ([]*resourceapi.DeviceClass, error) {
	l, err := env.Client.ResourceV1().DeviceClasses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*resourceapi.DeviceClass, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

func (oracleClasses) Get(name string) (*resourceapi.DeviceClass, error) {
	return env.Client.ResourceV1().DeviceClasses().Get(context.Background(), name, metav1.GetOptions{})
}

// kubeSchedulerAllocation is what kube-scheduler v1.36's DynamicResources
// plugin would allocate the claim on each node of the test, with every
// other claim of the namespace allocated as the API server shows it: its
// structured allocator, with the DRA features 1.36 has on by default,
// over the node's slices. A node missing from the result does not pass
// the plugin's Filter.
func (c *draCluster) kubeSchedulerAllocation(ctx context.Context, claim string) (map[string]resourceapi.AllocationResult, error) {
	claims, err := c.claims(ctx)
	if err != nil {
		return nil, err
	}
	target := claims[claim].DeepCopy()
	target.Status = resourceapi.ResourceClaimStatus{}
	allocated := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for name, cl := range claims {
		if name == claim || cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			allocated.AllocatedDevices.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	list, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var slices []*resourceapi.ResourceSlice
	for i := range list.Items {
		slices = append(slices, &list.Items[i])
	}
	features := structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true, ConsumableCapacity: true}
	out := map[string]resourceapi.AllocationResult{}
	for _, name := range c.nodes {
		node, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		a, err := structured.NewAllocator(ctx, features, allocated, oracleClasses{}, slices, dracel.NewCache(16, dracel.Features{EnableConsumableCapacity: true}))
		if err != nil {
			return nil, err
		}
		res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{target})
		if err != nil {
			return nil, fmt.Errorf("kube-scheduler's allocator on node %s: %w", name, err)
		}
		if len(res) == 1 {
			out[name] = res[0]
		}
	}
	return out, nil
}

// subrequestRank is kube-scheduler's DynamicResources score of an
// allocation of a firstAvailable request: the higher, the earlier the
// subrequest it chose (computeScore: the list's bound less its index).
func subrequestRank(r resourceapi.DeviceRequest, a resourceapi.AllocationResult) int {
	for i, sub := range r.FirstAvailable {
		if slices.ContainsFunc(a.Devices.Results, func(x resourceapi.DeviceRequestAllocationResult) bool { return x.Request == r.Name+"/"+sub.Name }) {
			return resourceapi.FirstAvailableDeviceRequestMaxSize - i
		}
	}
	return 0
}

// devices lists an allocation's results as request=pool/device, sorted.
func devices(a *resourceapi.AllocationResult) []string {
	var out []string
	for _, r := range a.Devices.Results {
		out = append(out, r.Request+"="+r.Pool+"/"+r.Device)
	}
	slices.Sort(out)
	return out
}

// TestDRAAllocationModes: a claim for all the GPUs that match and a claim
// with firstAvailable subrequests, placed by gpuplane-scheduler, against
// what kube-scheduler's DynamicResources plugin (its structured allocator
// and its score) would do in the same state. Two nodes of 4 GPUs, one GPU
// of the first held by another pod's claim: the All claim can only be
// the other node's 4 GPUs; then the firstAvailable claim (4 GPUs, else 2)
// finds 4 free nowhere and gets 2 of the 3 left, its results naming the
// subrequest "gpu/two". A second All claim then fits nowhere and waits.
func TestDRAAllocationModes(t *testing.T) {
	c := newDRACluster(t, 2, 4)
	c.run(adapter.Config{})
	c.claim("user", 1)
	c.create(c.pod("user").Label("app", "user").Claim("gpu", "user"))
	c.waitBound("app=user", 1, 120*time.Second)

	all := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: c.class, AllocationMode: resourceapi.DeviceAllocationModeAll}}
	first := resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "four", DeviceClassName: c.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "two", DeviceClassName: c.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
	}}
	for _, step := range []struct {
		name string
		req  resourceapi.DeviceRequest
		// wantResults is how many devices the allocation has, each
		// named for wantRequest.
		wantResults int
		wantRequest string
	}{
		{name: "all", req: all, wantResults: 4, wantRequest: "gpu"},
		{name: "first", req: first, wantResults: 2, wantRequest: "gpu/two"},
	} {
		// What kube-scheduler would do, before the pod exists.
		c.createClaim(step.name, step.req)
		want, err := c.kubeSchedulerAllocation(t.Context(), step.name)
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for _, a := range want {
			best = max(best, subrequestRank(step.req, a))
		}
		c.create(c.pod(step.name).Label("app", step.name).Claim("gpu", step.name))
		c.waitBound("app="+step.name, 1, 120*time.Second)
		var pod *corev1.Pod
		var got *resourceapi.AllocationResult
		framework.Eventually(t, 60*time.Second, "claim "+step.name+" allocated and reserved", func(ctx context.Context) (bool, error) {
			if _, err := c.checkClaims(ctx); err != nil {
				return false, err
			}
			ps, err := c.pods(ctx, "app="+step.name)
			if err != nil {
				return false, err
			}
			pod = ps[step.name]
			cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(ctx, step.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got = cl.Status.Allocation
			return got != nil && len(cl.Status.ReservedFor) == 1, fmt.Errorf("claim %s not allocated and reserved yet", step.name)
		})
		kube, ok := want[pod.Spec.NodeName]
		if !ok {
			t.Fatalf("%s: pod bound to %s, where kube-scheduler's allocator cannot allocate the claim (it can on %v)", step.name, pod.Spec.NodeName, keys(want))
		}
		if r := subrequestRank(step.req, *got); r != best {
			t.Errorf("%s: allocation %v ranks %d in kube-scheduler's score, the best node ranks %d", step.name, devices(got), r, best)
		}
		if len(got.Devices.Results) != step.wantResults || len(kube.Devices.Results) != step.wantResults {
			t.Fatalf("%s: allocation %v, kube-scheduler's %v: want %d devices", step.name, devices(got), devices(&kube), step.wantResults)
		}
		for _, r := range got.Devices.Results {
			if r.Request != step.wantRequest || r.Pool != pod.Spec.NodeName {
				t.Fatalf("%s: result %+v, want request %s on the pod's node %s", step.name, r, step.wantRequest, pod.Spec.NodeName)
			}
		}
		if step.req.Exactly != nil && !slices.Equal(devices(got), devices(&kube)) {
			// All the devices that match: no choice, so the very devices.
			t.Fatalf("%s: allocation %v, kube-scheduler's %v", step.name, devices(got), devices(&kube))
		}
	}

	// Another claim for all GPUs: every node has one taken, so it waits,
	// as kube-scheduler's allocator finds no node for it.
	c.createClaim("late", all)
	if want, err := c.kubeSchedulerAllocation(t.Context(), "late"); err != nil || len(want) != 0 {
		t.Fatalf("kube-scheduler's allocator places the late claim on %v (%v), want nowhere", keys(want), err)
	}
	c.create(c.pod("late").Label("app", "late").Claim("gpu", "late"))
	c.waitCondition("late", corev1.PodReasonUnschedulable, "", 60*time.Second)
	cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(t.Context(), "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Status.Allocation != nil {
		t.Errorf("the late claim for all GPUs was allocated: %v", devices(cl.Status.Allocation))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
