package adapter

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
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
