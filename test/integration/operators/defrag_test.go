package operators_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// statefulSet runs one replica of gpus GPUs that opted in to moves: a
// restartable workload whose pod comes back under its own name.
func (c *cluster) statefulSet(name string, gpus int) {
	c.t.Helper()
	p := framework.Pod(c.ns, name).SchedulerName(c.scheduler).GPUs(gpus).NodeSelector("test-ns", c.ns).
		Label("sts", name).Annotation(v1alpha1.MovableAnnotation, "true").Obj()
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"sts": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels, Annotations: p.Annotations}, Spec: p.Spec}}}
	ss.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := env.Client.AppsV1().StatefulSets(c.ns).Create(c.t.Context(), ss, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// podOn returns the node and UID of the bound, not terminating pod name.
func (c *cluster) podOn(ctx context.Context, name string) (string, string, error) {
	p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	if p.DeletionTimestamp != nil {
		return "", "", fmt.Errorf("%s is terminating", name)
	}
	return p.Spec.NodeName, string(p.UID), nil
}

// Two movable 4-GPU workloads sit on two 8-GPU nodes, one each: 8 GPUs
// are free, but no node has 8. An 8-GPU pod that may not evict anyone
// waits only for that; the scheduler moves one workload beside the other
// (its pod evicted and bound again on the other node, held there) and the
// 8-GPU pod starts in the node it left.
func TestDefragmentationMovesAWorkload(t *testing.T) {
	c := newCluster(t, 2)
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, DefragMovesPerHour: 4})
	// a and a filler share a node; b goes to the other.
	c.statefulSet("a", 4)
	framework.Eventually(t, 60*time.Second, "a bound", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "a-0")
		return err == nil && n != "", err
	})
	nodeA, _, _ := c.podOn(t.Context(), "a-0")
	filler := framework.Pod(c.ns, "filler").SchedulerName(c.scheduler).GPUs(4).NodeSelector("test-ns", c.ns).Obj()
	filler.Spec.NodeSelector["kubernetes.io/hostname"] = nodeA
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the filler bound beside a", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "filler")
		return err == nil && n == nodeA, fmt.Errorf("on %q (%w)", n, err)
	})
	c.statefulSet("b", 4)
	framework.Eventually(t, 60*time.Second, "b bound on the other node", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "b-0")
		return err == nil && n != "" && n != nodeA, fmt.Errorf("on %q (%w)", n, err)
	})
	if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), "filler", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	_, uidA, _ := c.podOn(t.Context(), "a-0")
	nodeB, uidB, _ := c.podOn(t.Context(), "b-0")
	// big has the workloads' priority and queue: it may neither preempt
	// nor reclaim them.
	big := framework.Pod(c.ns, "big").SchedulerName(c.scheduler).GPUs(8).NodeSelector("test-ns", c.ns).Obj()
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 120*time.Second, "big bound, a and b together on the other node", func(ctx context.Context) (bool, error) {
		nBig, _, err := c.podOn(ctx, "big")
		if err != nil || nBig == "" {
			return false, fmt.Errorf("big on %q: %s (%w)", nBig, c.waiting(ctx, "app!=none"), err)
		}
		na, _, errA := c.podOn(ctx, "a-0")
		nb, _, errB := c.podOn(ctx, "b-0")
		return errA == nil && errB == nil && na != "" && na == nb && na != nBig, fmt.Errorf("big on %s, a on %q, b on %q (%w)", nBig, na, nb, errors.Join(errA, errB))
	})
	// Exactly one of them moved: a pod made again, where the other ran.
	na, ua, _ := c.podOn(t.Context(), "a-0")
	_, ub, _ := c.podOn(t.Context(), "b-0")
	if moved := (ua != uidA) != (ub != uidB); !moved {
		t.Fatalf("a %s->%s, b %s->%s: want exactly one made again", uidA, ua, uidB, ub)
	}
	if ua != uidA && na != nodeB || ub != uidB && na != nodeA {
		t.Fatalf("the moved pod runs on %s; want it beside the one that stayed", na)
	}
	framework.Eventually(t, 30*time.Second, "an eviction event saying defragment", func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Preempted"})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "(defragment) to make room for pod/"+c.ns+"/big") {
				return true, nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Errorf("Preempted events %q, none for the move", seen)
	})
}
