package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/adapter"
	agentdra "github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// shareSlice publishes the cluster's GPUs for consumable capacity, as the
// agent does with --dra-shared-gpus.
func (c *draCluster) shareSlice(node string) {
	c.t.Helper()
	rc := env.Client.ResourceV1().ResourceSlices()
	s, err := rc.Get(c.t.Context(), framework.DRAGPUSlice(node, 0, "").Name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = agentdra.SharedCapacity(d.Capacity[dra.CapacityMemory].Value)
	}
	s.Spec.Pool.Generation++
	if _, err := rc.Update(c.t.Context(), s, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("publishing %s's GPU for consumable capacity: %v", node, err)
	}
}

func (c *draCluster) capacityClaim(name, memory string) {
	c.t.Helper()
	spec := framework.DRAClaimSpec(c.class, 1)
	spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		dra.CapacityMemory: resource.MustParse(memory),
	}}
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}, Spec: spec}
	if _, err := env.Client.ResourceV1().ResourceClaims(c.ns).Create(c.t.Context(), cl, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

// TestDRACapacityClaimsShareAGPU: gpuplane-scheduler places two claims of
// 20Gi as shares of the one 80GB GPU of a node, the structured allocator
// records what each consumed, and a third claim of 50Gi, which does not
// fit beside them, waits.
func TestDRACapacityClaimsShareAGPU(t *testing.T) {
	c := newDRACluster(t, 1, 1)
	c.shareSlice(c.nodes[0])
	c.run(adapter.Config{})
	c.capacityClaim("cap0", "20Gi")
	c.capacityClaim("cap1", "20Gi")
	c.create(c.pod("p0").Label("app", "cap").Claim("gpu", "cap0"), c.pod("p1").Label("app", "cap").Claim("gpu", "cap1"))
	c.waitBound("app=cap", 2, 120*time.Second)
	framework.Eventually(t, 60*time.Second, "both claims allocated a 20Gi share of gpu-0", func(ctx context.Context) (bool, error) {
		claims, err := c.claims(ctx)
		if err != nil {
			return false, err
		}
		shares := map[string]bool{}
		for _, name := range []string{"cap0", "cap1"} {
			cl := claims[name]
			if cl == nil || cl.Status.Allocation == nil || len(cl.Status.ReservedFor) != 1 {
				return false, fmt.Errorf("claim %s not allocated and reserved yet", name)
			}
			r := cl.Status.Allocation.Devices.Results
			if len(r) != 1 || r[0].Device != "gpu-0" || r[0].ShareID == nil {
				return false, fmt.Errorf("claim %s: %+v, want a share of gpu-0", name, r)
			}
			if q := r[0].ConsumedCapacity[dra.CapacityMemory]; q.Cmp(resource.MustParse("20Gi")) != 0 {
				return false, fmt.Errorf("claim %s consumed %s memory, want 20Gi", name, q.String())
			}
			shares[string(*r[0].ShareID)] = true
		}
		return len(shares) == 2, fmt.Errorf("share IDs %v", shares)
	})
	c.capacityClaim("cap2", "50Gi")
	c.create(c.pod("p2").Label("app", "big").Claim("gpu", "cap2"))
	c.waitCondition("p2", corev1.PodReasonUnschedulable, "", 60*time.Second)
	cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(t.Context(), "cap2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Status.Allocation != nil {
		t.Errorf("the 50Gi claim was allocated beside two 20Gi shares of an 80Gi GPU: %+v", cl.Status.Allocation)
	}
}
