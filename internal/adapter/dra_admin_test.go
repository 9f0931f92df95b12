package adapter

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// adminClaim asks for count devices with admin access.
func adminClaim(name string, count int64) *resourceapi.ResourceClaim {
	cl := gpuClaim(name, "gpu.gpuplane.io", count)
	cl.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	return cl
}

// TestDRAAdminAccess: a pod whose claim asks for devices with admin
// access, in a namespace labelled for it, is placed on a node with enough
// devices although other pods hold them all, and holds none: the next
// pod asking for a GPU still gets one. Without the label it waits, told
// which label admin access needs.
func TestDRAAdminAccess(t *testing.T) {
	f := newDRAFixture(t, map[string]int{"a": 2, "b": 4})
	for _, name := range []string{"u0", "u1", "u2", "u3"} {
		f.cache.upsertClaim(gpuClaim(name, "gpu.gpuplane.io", 1))
		f.cache.upsertPod(claimPod(name, name))
	}
	f.cycle()
	f.applyClaims()
	if n := len(f.api.claimLog()); n != 4 {
		t.Fatalf("claim writes %v, want the four users allocated", f.api.claimLog())
	}

	f.cache.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})
	f.cache.upsertClaim(adminClaim("mon", 4))
	f.cache.upsertPod(claimPod("mon", "mon"))
	f.cycle()
	if got := f.status.conditions["ns/mon"]; !strings.Contains(got, "AdminAccessNotAllowed") || !strings.Contains(got, resourceapi.DRAAdminNamespaceLabelKey+"=true") {
		t.Fatalf("admin access without the namespace label: pod says %q, want AdminAccessNotAllowed naming the label", got)
	}

	f.cache.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "true"}}})
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 5 || !strings.HasPrefix(log[4], "ns/mon ns/mon b ") || strings.Count(log[4], "gpu-") != 4 {
		t.Fatalf("claim writes %v, want mon's claim given all four devices of b (the only node with four)", log)
	}
	f.applyClaims()

	// The admin claim holds nothing: b's free GPUs are still free.
	f.cache.upsertClaim(gpuClaim("late", "gpu.gpuplane.io", 1))
	f.cache.upsertPod(claimPod("late", "late"))
	f.cycle()
	if log := f.api.claimLog(); len(log) != 6 || !strings.HasPrefix(log[5], "ns/late ns/late ") {
		t.Fatalf("claim writes %v, want the late pod given a free GPU beside the admin claim", log)
	}

	// No node has five devices: the pod waits, told why of each node.
	f.cache.upsertClaim(adminClaim("five", 5))
	f.cache.upsertPod(claimPod("five", "five"))
	f.cycle()
	if got := f.status.conditions["ns/five"]; !strings.Contains(got, "2 no devices its ResourceClaims ask for with admin access") {
		t.Fatalf("admin access to more devices than any node has: pod says %q, want both nodes refused for it", got)
	}
}
