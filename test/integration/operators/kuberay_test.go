package operators_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var rayClusters = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}

// startKubeRay runs the KubeRay operator (ray-operator, pinned in
// tools/operators/kuberay) with its CRDs; its webhooks are off unless
// asked for.
func startKubeRay(t *testing.T) {
	t.Helper()
	startOperator(t, localcluster.OperatorKubeRay)
}

// rayCluster creates a RayCluster whose head asks for no GPU and whose one
// worker group has workers workers (minReplicas too) of gpus GPUs.
func (c *cluster) rayCluster(name string, workers int64, gpus int) {
	c.t.Helper()
	spec := func(container string, gpus int) map[string]any {
		s := c.podSpec(max(gpus, 1))
		ctr := s["containers"].([]any)[0].(map[string]any)
		ctr["name"] = container
		if gpus == 0 {
			delete(ctr, "resources")
		}
		delete(s, "restartPolicy")
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{"rc": name}}, "spec": s}
	}
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": spec("ray-head", 0)},
			"workerGroupSpecs": []any{map[string]any{
				"groupName": "gpu", "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
				"rayStartParams": map[string]any{}, "template": spec("ray-worker", gpus),
			}},
		},
	}}
	if _, err := c.dyn.Resource(rayClusters).Namespace(c.ns).Create(c.t.Context(), rc, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating RayCluster %s: %v", name, err)
	}
}

// A RayCluster through the KubeRay operator is one gang of its head and
// its workers' minimum: one that cannot fit does not start its head alone
// (a head without workers holds resources and runs nothing).
func TestRayClusterIsOneGang(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	startKubeRay(t)
	c.runScheduler()
	c.rayCluster("fits", 3, 4) // head + 12 GPUs
	framework.Eventually(t, 90*time.Second, "RayCluster fits bound whole", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "rc=fits")
		return err == nil && n == 4, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
	c.rayCluster("waits", 2, 4) // head + 8 GPUs: 4 are free
	framework.Eventually(t, 60*time.Second, "RayCluster waits's pods made", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "rc=waits")
		if n > 0 {
			t.Fatalf("%d of waits's pods bound while it cannot run whole", n)
		}
		return err == nil && total == 3, fmt.Errorf("%d pods (%w)", total, err)
	})
	for range 10 {
		if n, _, err := c.bound(t.Context(), "rc=waits"); err != nil || n != 0 {
			t.Fatalf("%d of waits's pods bound (%v): its head must not start without its workers", n, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	list, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(t.Context(), metav1.ListOptions{LabelSelector: v1alpha1.DerivedLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[int64]bool{}
	for _, u := range list.Items {
		mm, _, _ := unstructured.NestedInt64(u.Object, "spec", "minMember")
		sizes[mm] = true
	}
	if len(list.Items) != 2 || !sizes[4] || !sizes[3] {
		t.Errorf("derived PodGroups %d with minMembers %v, want 4 (head + 3) and 3 (head + 2)", len(list.Items), sizes)
	}
	if err := c.dyn.Resource(rayClusters).Namespace(c.ns).Delete(t.Context(), "fits", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "RayCluster waits bound whole once fits is gone", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "rc=fits"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			_ = env.Client.CoreV1().Pods(c.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		}
		n, total, err := c.bound(ctx, "rc=waits")
		return err == nil && n == 3, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
}
