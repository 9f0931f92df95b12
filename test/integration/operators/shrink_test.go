package operators_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// priorities creates a low and a high PriorityClass for the test's
// namespace, deleted when it ends, and waits until the API server's
// Priority admission sees them. It returns their names.
func (c *cluster) priorities() (low, high string) {
	t := c.t
	t.Helper()
	low, high = c.ns+"-low", c.ns+"-high"
	for name, v := range map[string]int32{low: 10, high: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if _, err := env.Client.SchedulingV1().PriorityClasses().Create(t.Context(), pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "priority-probe"},
			Spec: corev1.PodSpec{PriorityClassName: name, Containers: []corev1.Container{{Name: "c", Image: "probe"}}}}
		framework.Eventually(t, 10*time.Second, "Priority admission sees class "+name, func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(c.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, err
		})
	}
	return low, high
}

// boundUIDs returns the UIDs of the bound pods matching selector by name.
func (c *cluster) boundUIDs(ctx context.Context, selector string) (map[string]types.UID, error) {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[string]types.UID{}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			out[p.Name] = p.UID
		}
	}
	return out, nil
}

// elasticPyTorchJob creates an elastic PyTorchJob of four workers that
// may run with two (minReplicas 2, maxReplicas 4), each worker labelled
// ptj=<name>, with spec as its pod spec and restartPolicy for its
// workers.
func (c *cluster) elasticPyTorchJob(t *testing.T, name, restartPolicy string, spec map[string]any) {
	t.Helper()
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			"elasticPolicy": map[string]any{"minReplicas": int64(2), "maxReplicas": int64(4), "rdzvBackend": "c10d"},
			"pytorchReplicaSpecs": map[string]any{"Worker": map[string]any{"replicas": int64(4), "restartPolicy": restartPolicy,
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"ptj": name}}, "spec": spec}}},
		},
	}}
	if _, err := c.dyn.Resource(pyTorchJobs).Namespace(c.ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// urgent creates a lone pod of the high class asking for gpus GPUs and
// waits until it is bound.
func (c *cluster) urgent(class string, gpus int) {
	c.t.Helper()
	p := framework.Pod(c.ns, "urgent").SchedulerName(c.scheduler).GPUs(gpus).NodeSelector("test-ns", c.ns).Label("app", "urgent").Obj()
	p.Spec.PriorityClassName = class
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(c.t.Context(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	framework.Eventually(c.t, 90*time.Second, "the urgent pod bound", func(ctx context.Context) (bool, error) {
		n, _, err := c.bound(ctx, "app=urgent")
		return err == nil && n == 1, fmt.Errorf("%s (%w)", c.waiting(ctx, "app=urgent"), err)
	})
}

// kept checks that the pods of before still bound after the shrink are
// the same pods (same UIDs: never restarted), exactly want of them, and
// that the others were evicted with the shrink named.
func (c *cluster) kept(before map[string]types.UID, selector string, want int, mustKeep ...string) {
	t := c.t
	t.Helper()
	var after map[string]types.UID
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("%d of the group's first pods left running", want), func(ctx context.Context) (bool, error) {
		var err error
		after, err = c.boundUIDs(ctx, selector)
		same := 0
		for name, uid := range before {
			if after[name] == uid {
				same++
			}
		}
		return err == nil && same == want, fmt.Errorf("%d of %d kept: %v (%w)", same, len(before), after, err)
	})
	for _, name := range mustKeep {
		if after[name] != before[name] {
			t.Fatalf("%s was restarted or evicted: %v, before %v", name, after, before)
		}
	}
	// The members given up heard why.
	framework.Eventually(t, 30*time.Second, "an eviction event naming the urgent pod", func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Preempted"})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "urgent") {
				return true, nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Errorf("events %v", seen)
	})
}

// An elastic PyTorchJob (minReplicas 2 of 4 workers) that a
// higher-priority pod needs room from gives up workers above its minimum
// and keeps training on the rest, instead of being evicted whole.
func TestElasticPyTorchJobShrinks(t *testing.T) {
	c := newCluster(t, 1) // 8 GPUs: four 2-GPU workers fill them
	startTrainingOperator(t)
	low, high := c.priorities()
	c.runScheduler()
	spec := c.podSpec(2)
	spec["containers"].([]any)[0].(map[string]any)["name"] = "pytorch"
	spec["priorityClassName"] = low
	c.elasticPyTorchJob(t, "shrinks", "Never", spec)
	var before map[string]types.UID
	framework.Eventually(t, 90*time.Second, "the elastic job grown to four workers", func(ctx context.Context) (bool, error) {
		var err error
		before, err = c.boundUIDs(ctx, "ptj=shrinks")
		return err == nil && len(before) == 4, fmt.Errorf("%v bound (%w)", before, err)
	})
	c.urgent(high, 4)
	// Two workers (the last ranks) went; the first two train on.
	c.kept(before, "ptj=shrinks", 2, "shrinks-worker-0", "shrinks-worker-1")
}

// A RayCluster whose worker group may run from one to three workers gives
// up a worker, never its head, to a higher-priority pod.
func TestRayClusterWorkerGroupShrinks(t *testing.T) {
	c := newCluster(t, 1) // 8 GPUs: three 2-GPU workers take 6
	startKubeRay(t)
	low, high := c.priorities()
	c.runScheduler()
	template := func(container string, gpus int) map[string]any {
		s := c.podSpec(max(gpus, 1))
		ctr := s["containers"].([]any)[0].(map[string]any)
		ctr["name"] = container
		if gpus == 0 {
			delete(ctr, "resources")
		}
		delete(s, "restartPolicy")
		s["priorityClassName"] = low
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{"rc": "elastic"}}, "spec": s}
	}
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": "elastic", "namespace": c.ns},
		"spec": map[string]any{
			"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": template("ray-head", 0)},
			"workerGroupSpecs": []any{map[string]any{
				"groupName": "gpu", "replicas": int64(3), "minReplicas": int64(1), "maxReplicas": int64(3),
				"rayStartParams": map[string]any{}, "template": template("ray-worker", 2),
			}},
		},
	}}
	if _, err := c.dyn.Resource(rayClusters).Namespace(c.ns).Create(t.Context(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var before map[string]types.UID
	framework.Eventually(t, 90*time.Second, "the RayCluster's head and three workers bound", func(ctx context.Context) (bool, error) {
		var err error
		before, err = c.boundUIDs(ctx, "rc=elastic")
		return err == nil && len(before) == 4, fmt.Errorf("%v bound (%w)", before, err)
	})
	var head string
	for name := range before {
		if strings.Contains(name, "-head") {
			head = name
		}
	}
	if head == "" {
		t.Fatalf("no head among %v", before)
	}
	c.urgent(high, 4) // 2 GPUs are free: one worker must go
	c.kept(before, "rc=elastic", 3, head)
}
