package operators_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var pyTorchJobs = framework.PyTorchJobs

// startTrainingOperator runs Kubeflow's training-operator (v1, pinned in
// tools/operators/training-operator) with its CRDs and the webhook
// scaffolding its installation would make (localcluster.StartOperator),
// only its PyTorchJob and MPIJob controllers.
func startTrainingOperator(t *testing.T) {
	t.Helper()
	startOperator(t, localcluster.OperatorTraining, "--enable-scheme=pytorchjob", "--enable-scheme=mpijob")
}

// pyTorchJob creates a PyTorchJob of one master and workers workers, gpus
// GPUs each, as its users write it.
func (c *cluster) pyTorchJob(name string, workers int64, gpus int) {
	c.t.Helper()
	replica := func(n int64) map[string]any {
		spec := c.podSpec(gpus)
		spec["containers"].([]any)[0].(map[string]any)["name"] = "pytorch"
		return map[string]any{"replicas": n, "restartPolicy": "Never",
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"ptj": name}}, "spec": spec}}
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Master": replica(1),
			"Worker": replica(workers),
		}},
	}}
	if _, err := c.dyn.Resource(pyTorchJobs).Namespace(c.ns).Create(c.t.Context(), job, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating PyTorchJob %s: %v", name, err)
	}
}

// Two PyTorchJobs submitted through the training operator that together do
// not fit never both start in part: one runs whole (master and workers),
// the other waits whole, and runs once the first is gone.
func TestCompetingPyTorchJobs(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	startTrainingOperator(t)
	c.runScheduler()
	c.pyTorchJob("first", 3, 4)  // 4 pods x 4 GPUs
	c.pyTorchJob("second", 3, 4) // the same: only one fits
	var running, waiting string
	framework.Eventually(t, 90*time.Second, "one PyTorchJob running whole", func(ctx context.Context) (bool, error) {
		a, ta, err := c.bound(ctx, "ptj=first")
		if err != nil {
			return false, err
		}
		b, tb, err := c.bound(ctx, "ptj=second")
		if err != nil {
			return false, err
		}
		switch {
		case a > 0 && b > 0:
			t.Fatalf("both started: %d of first's and %d of second's pods bound", a, b)
		case a == 4:
			running, waiting = "first", "second"
		case b == 4:
			running, waiting = "second", "first"
		}
		return running != "", fmt.Errorf("first %d/%d, second %d/%d bound", a, ta, b, tb)
	})
	// The operator makes the other job's pods one by one: all four, and
	// none bound.
	framework.Eventually(t, 60*time.Second, waiting+"'s pods made", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "ptj="+waiting)
		if n > 0 {
			t.Fatalf("%s: %d of its pods bound while %s runs", waiting, n, running)
		}
		return err == nil && total == 4, fmt.Errorf("%d pods (%w)", total, err)
	})
	for range 10 {
		if n, total, err := c.bound(t.Context(), "ptj="+waiting); err != nil || n != 0 {
			t.Fatalf("%s: %d of %d pods bound (%v), want none while %s runs", waiting, n, total, err, running)
		}
		time.Sleep(300 * time.Millisecond)
	}
	list, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(t.Context(), metav1.ListOptions{LabelSelector: v1alpha1.DerivedLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list.Items {
		if mm, _, _ := unstructured.NestedInt64(u.Object, "spec", "minMember"); mm != 4 {
			t.Errorf("PodGroup %s: minMember %d, want 4 (master and three workers)", u.GetName(), mm)
		}
	}
	if len(list.Items) != 2 {
		t.Errorf("%d derived PodGroups, want one per PyTorchJob", len(list.Items))
	}
	bg := metav1.DeletePropagationBackground
	if err := c.dyn.Resource(pyTorchJobs).Namespace(c.ns).Delete(t.Context(), running, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, running+"'s pods gone", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "ptj=" + running})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			_ = env.Client.CoreV1().Pods(c.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	})
	framework.Eventually(t, 60*time.Second, waiting+" running whole", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "ptj="+waiting)
		return err == nil && n == 4, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
}
