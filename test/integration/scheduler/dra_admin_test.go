package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// labelAdmin sets or removes the label that allows the namespace's claims
// admin access to devices.
func (c *draCluster) labelAdmin(on bool) {
	c.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, resourceapi.DRAAdminNamespaceLabelKey)
	if !on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, resourceapi.DRAAdminNamespaceLabelKey)
	}
	if _, err := env.Client.CoreV1().Namespaces().Patch(c.t.Context(), c.ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatalf("labelling namespace %s: %v", c.ns, err)
	}
}

// adminClaim creates a claim of count devices with admin access.
func (c *draCluster) adminClaim(name string, count int64) {
	c.t.Helper()
	spec := framework.DRAClaimSpec(c.class, count)
	spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}, Spec: spec}
	if _, err := env.Client.ResourceV1().ResourceClaims(c.ns).Create(c.t.Context(), cl, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

// TestDRAAdminAccess: on a node whose two GPUs other pods' claims hold, a
// pod whose claim asks for both with admin access, in a namespace labelled
// for it, is bound there and its claim allocated both devices with admin
// access, as kube-scheduler's allocator gives them. A claim with admin
// access whose namespace lost the label waits, naming the label.
func TestDRAAdminAccess(t *testing.T) {
	c := newDRACluster(t, 1, 2)
	c.run(adapter.Config{})
	c.claim("u0", 1)
	c.claim("u1", 1)
	c.create(c.pod("u0").Label("app", "user").Claim("gpu", "u0"), c.pod("u1").Label("app", "user").Claim("gpu", "u1"))
	c.waitBound("app=user", 2, 120*time.Second)

	c.labelAdmin(true)
	c.adminClaim("mon", 2)
	c.adminClaim("late", 1)
	c.create(c.pod("mon").Label("app", "mon").Claim("gpu", "mon"))
	c.waitBound("app=mon", 1, 120*time.Second)
	framework.Eventually(t, 60*time.Second, "the admin claim allocated both devices with admin access", func(ctx context.Context) (bool, error) {
		cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(ctx, "mon", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		a := cl.Status.Allocation
		if a == nil {
			return false, fmt.Errorf("not allocated")
		}
		for _, r := range a.Devices.Results {
			if !ptr.Deref(r.AdminAccess, false) {
				return false, fmt.Errorf("result %+v without adminAccess", r)
			}
		}
		return len(a.Devices.Results) == 2, fmt.Errorf("results %+v", a.Devices.Results)
	})

	c.labelAdmin(false)
	c.create(c.pod("late").Claim("gpu", "late"))
	c.waitCondition("late", "AdminAccessNotAllowed", resourceapi.DRAAdminNamespaceLabelKey+"=true", 60*time.Second)
	cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(t.Context(), "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Status.Allocation != nil {
		t.Errorf("the claim of a namespace without the label was allocated: %+v", cl.Status.Allocation)
	}
}
