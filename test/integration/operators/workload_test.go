package operators_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var workloadPodGroups = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}

// Pods that name a Kubernetes Workload API PodGroup (1.36's
// spec.schedulingGroup) are gang-scheduled at its gang.minCount.
func TestWorkloadAPIPodGroups(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	c.runScheduler()
	group := func(name string, minCount int64) {
		pg := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
			"metadata": map[string]any{"name": name, "namespace": c.ns},
			"spec":     map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": minCount}}},
		}}
		if _, err := c.dyn.Resource(workloadPodGroups).Namespace(c.ns).Create(t.Context(), pg, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Workload API PodGroup %s: %v", name, err)
		}
	}
	pods := func(name string, n, gpus int) {
		for i := range n {
			p := framework.Pod(c.ns, fmt.Sprintf("%s-%d", name, i)).SchedulerName(c.scheduler).GPUs(gpus).NodeSelector("test-ns", c.ns).Label("wg", name).Obj()
			pgName := name
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &pgName}
			if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating pod: %v", err)
			}
		}
	}
	group("fits", 3)
	group("too-big", 3)
	pods("fits", 3, 4)
	pods("too-big", 3, 6) // 18 GPUs: never fits beside anything
	framework.Eventually(t, 60*time.Second, "the fitting gang bound", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "wg=fits")
		return err == nil && n == 3, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
	list, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(t.Context(), metav1.ListOptions{LabelSelector: v1alpha1.DerivedLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Errorf("%d derived PodGroups, want one per Workload API PodGroup", len(list.Items))
	}
	for _, u := range list.Items {
		if mm, _, _ := unstructured.NestedInt64(u.Object, "spec", "minMember"); mm != 3 {
			t.Errorf("PodGroup %s: minMember %d, want the Workload API's minCount 3", u.GetName(), mm)
		}
	}
	for range 10 {
		if n, _, err := c.bound(t.Context(), "wg=too-big"); err != nil || n != 0 {
			t.Fatalf("%d pods of too-big bound (%v), want none", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
