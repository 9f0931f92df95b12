package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// queue creates a cluster-scoped Queue (deleted when the test ends) with
// GPU guarantee and limit (0 for none).
func (c *cluster) queue(name, parent string, guaranteed, limit int64) {
	c.t.Helper()
	r := v1alpha1.QueueResource{Name: string(framework.ResourceGPU), Weight: 1}
	if guaranteed > 0 {
		r.Guaranteed = resource.NewQuantity(guaranteed, resource.DecimalSI)
	}
	if limit > 0 {
		r.Limit = resource.NewQuantity(limit, resource.DecimalSI)
	}
	q := &v1alpha1.Queue{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Queue"},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{Parent: parent, Resources: []v1alpha1.QueueResource{r}}}
	c.createObj(v1alpha1.QueuesResource, "", q)
	c.t.Cleanup(func() {
		if err := c.dyn.Resource(v1alpha1.QueuesResource).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.t.Errorf("deleting queue %s: %v", name, err)
		}
	})
}

// forbidPreemption sets the queue's spec.preemption to Never.
func (c *cluster) forbidPreemption(q string) {
	c.t.Helper()
	u, err := c.dyn.Resource(v1alpha1.QueuesResource).Get(c.t.Context(), q, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, string(v1alpha1.PreemptNever), "spec", "preemption"); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.dyn.Resource(v1alpha1.QueuesResource).Update(c.t.Context(), u, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) queuePods(queue string, n int) {
	c.t.Helper()
	for i := range n {
		c.create(c.pod(fmt.Sprintf("%s-%d", queue, i)).GPUs(1).Label(v1alpha1.QueueLabel, queue).Label("queue", queue))
	}
}

func TestQueueLimitBorrowingAndReclaim(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "quota")...)
	root, a, b, capped := "root-"+c.ns, "a-"+c.ns, "b-"+c.ns, "capped-"+c.ns
	c.queue(root, "", 0, 0)
	c.queue(a, root, 8, 0)
	c.queue(b, root, 8, 0)
	c.queue(capped, "", 0, 2)
	c.run(adapter.Config{})

	t.Run("a queue's limit holds", func(t *testing.T) {
		c.alwaysPods("queue "+capped+" within its limit of 2 GPUs", "queue="+capped, atMostBound(2))
		c.queuePods(capped, 3)
		c.waitBound("queue="+capped, 2, 30*time.Second)
		ps, err := c.pods(t.Context(), "queue="+capped)
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range ps {
			if p.Spec.NodeName == "" {
				c.waitCondition(name, model.UnplacedQueueLimit, "is at its limit", 30*time.Second)
			}
		}
		if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(t.Context(), deleteNow(), listBy("queue="+capped)); err != nil {
			t.Fatal(err)
		}
		c.waitBound("queue="+capped, 0, 30*time.Second)
	})
	t.Run("an idle sibling's guarantee is borrowed", func(t *testing.T) {
		c.queuePods(a, 16)
		c.waitBound("queue="+a, 16, 30*time.Second)
		// Each binding records the queue the pod counts against, for
		// the agent's gpuplane_pod_queue_info and gpuplane cost.
		ps, err := c.pods(t.Context(), "queue="+a)
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range ps {
			if got := p.Annotations[gpupod.QueueAnnotation]; got != a {
				t.Errorf("pod %s bound with %s=%q, want %q", name, gpupod.QueueAnnotation, got, a)
			}
		}
	})
	t.Run("the owner reclaims its guarantee", func(t *testing.T) {
		// Only what a borrowed: its guarantee of 8 stays bound throughout.
		c.alwaysPods("queue "+a+" keeps its guarantee of 8 GPUs", "queue="+a, atLeastRunning(func() int { return 8 }))
		c.queuePods(b, 8)
		c.waitBound("queue="+b, 8, 60*time.Second)
		c.waitBound("queue="+a, 8, 30*time.Second)
	})
	t.Run("Queue status shows usage and fair share", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "queue "+b+" status", func(ctx context.Context) (bool, error) {
			u, err := c.dyn.Resource(v1alpha1.QueuesResource).Get(ctx, b, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			usage, _, _ := unstructuredString(u.Object, "status", "usage", string(framework.ResourceGPU))
			fair, _, _ := unstructuredString(u.Object, "status", "fairShare", string(framework.ResourceGPU))
			return usage == "8" && fair == "8", fmt.Errorf("usage %q, fair share %q", usage, fair)
		})
	})
}

// priorityClasses creates PriorityClasses by name and value, deleted when
// the test ends.
func priorityClasses(t *testing.T, values map[string]int32) {
	t.Helper()
	for name, v := range values {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if _, err := env.Client.SchedulingV1().PriorityClasses().Create(t.Context(), pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// The API server's Priority admission reads classes from its own
	// informer, so a pod naming a class just created can be refused for a
	// moment. A dry-run create passes admission without storing anything.
	for name := range values {
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "priority-probe"},
			Spec:       corev1.PodSpec{PriorityClassName: name, Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
		}
		framework.Eventually(t, 10*time.Second, "Priority admission sees class "+name, func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, err
		})
	}
}

func TestPriorityPreemptionHonoursPodDisruptionBudget(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "pdb")...)
	low, high := "low-"+c.ns, "high-"+c.ns
	priorityClasses(t, map[string]int32{low: 100, high: 1000})
	for i := range 8 {
		p := c.pod(fmt.Sprintf("low-%d", i)).GPUs(1).Label("app", "low").Obj()
		p.Spec.PriorityClassName = low
		c.createPod(p)
	}
	minAvailable := intstr.FromInt32(8)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "low"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "low"}}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(c.ns).Create(t.Context(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.run(adapter.Config{})
	c.waitBound("app=low", 8, 30*time.Second)
	waitPDB := func(allowed int32) {
		framework.Eventually(t, 60*time.Second, fmt.Sprintf("PDB allows %d disruptions", allowed), func(ctx context.Context) (bool, error) {
			p, err := env.Client.PolicyV1().PodDisruptionBudgets(c.ns).Get(ctx, "low", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return p.Status.CurrentHealthy == 8 && p.Status.DisruptionsAllowed == allowed && p.Status.ObservedGeneration == p.Generation,
				fmt.Errorf("healthy %d, allowed %d", p.Status.CurrentHealthy, p.Status.DisruptionsAllowed)
		})
	}
	waitPDB(0)
	// Evictions the budget allows: none until the test lowers it.
	var allowed atomic.Int32
	c.alwaysPods("no more low-priority pods evicted than the budget allows", "app=low", atLeastRunning(func() int { return 8 - int(allowed.Load()) }))

	hp := c.pod("urgent").GPUs(1).Label("app", "high").Obj()
	hp.Spec.PriorityClassName = high
	c.createPod(hp)
	t.Run("the budget holds: the preemptor waits", func(t *testing.T) {
		c.waitCondition("urgent", corev1.PodReasonUnschedulable, "insufficient nvidia.com/gpu", 30*time.Second)
		if n, _, err := c.bound(t.Context(), "app=low"); err != nil || n != 8 {
			t.Fatalf("%d low-priority pods bound (err %v), want all 8: the PodDisruptionBudget allows no eviction", n, err)
		}
	})
	t.Run("once the budget allows one, exactly one victim goes", func(t *testing.T) {
		p, err := env.Client.PolicyV1().PodDisruptionBudgets(c.ns).Get(t.Context(), "low", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seven := intstr.FromInt32(7)
		p.Spec.MinAvailable = &seven
		allowed.Store(1)
		if _, err := env.Client.PolicyV1().PodDisruptionBudgets(c.ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitBound("app=high", 1, 60*time.Second)
		c.waitBound("app=low", 7, 30*time.Second)
	})
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	cur := any(obj)
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func TestQueueWithPreemptionNeverDoesNotEvict(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "nopreempt")...)
	q := "nopreempt-" + c.ns
	c.queue(q, "", 0, 0)
	c.forbidPreemption(q)
	low, high := "np-low-"+c.ns, "np-high-"+c.ns
	priorityClasses(t, map[string]int32{low: 100, high: 1000})
	for i := range 8 {
		p := c.pod(fmt.Sprintf("low-%d", i)).GPUs(1).Label("app", "low").Label(v1alpha1.QueueLabel, q).Obj()
		p.Spec.PriorityClassName = low
		c.createPod(p)
	}
	c.run(adapter.Config{})
	c.waitBound("app=low", 8, 30*time.Second)
	c.alwaysPods("no low-priority pod evicted", "app=low", atLeastRunning(func() int { return 8 }))
	hp := c.pod("urgent").GPUs(1).Label("app", "high").Label(v1alpha1.QueueLabel, q).Obj()
	hp.Spec.PriorityClassName = high
	c.createPod(hp)
	c.waitCondition("urgent", corev1.PodReasonUnschedulable, "spec.preemption: Never", 30*time.Second)
	if n, _, err := c.bound(t.Context(), "app=low"); err != nil || n != 8 {
		t.Fatalf("%d low-priority pods bound (err %v), want all 8: the queue forbids preemption", n, err)
	}
}

// TestGuaranteeReclaimInAPool is the two-team pool of examples/queues: team
// B borrows team A's idle guarantee in a pool of nodes that only their work
// may use, while other nodes have free GPUs neither team can use. Team A's
// gang takes its guarantee back: exactly the borrowed pods go, all from the
// pool, and the gang binds whole there.
func TestGuaranteeReclaimInAPool(t *testing.T) {
	nodes := gpuNodes(2, "pool")
	pool, other := nodes[0].Label("pool", "batch").Taint("pool", "batch", corev1.TaintEffectNoSchedule), nodes[1]
	poolName := pool.Obj().Name
	c := newCluster(t, pool, other)
	root, a, b := "research-"+c.ns, "team-a-"+c.ns, "team-b-"+c.ns
	c.queue(root, "", 0, 0)
	c.queue(a, root, 4, 0)
	c.queue(b, root, 4, 0)
	inPool := func(pb *framework.PodBuilder) *framework.PodBuilder {
		return pb.NodeSelector("pool", "batch").Tolerate("pool", "batch")
	}
	c.run(adapter.Config{})
	// Team B's workers belong to a ReplicaSet, which replaces evicted ones
	// at once: the replacements must not take the room made for team A
	// (which would make team A reclaim again, and again).
	worker := inPool(c.pod("b").GPUs(1).Label(v1alpha1.QueueLabel, b).Label("team", "b")).Obj()
	replicas := int32(8)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "team-b"},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: worker.Labels}, Spec: worker.Spec}}}
	if _, err := env.Client.AppsV1().ReplicaSets(c.ns).Create(t.Context(), rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBound("team=b", 8, 60*time.Second)

	c.podGroup("train", 4, a)
	for i := range 4 {
		c.create(inPool(c.pod(fmt.Sprintf("a-%d", i)).GPUs(1).Label(v1alpha1.PodGroupLabel, "train").Label("team", "a")))
	}
	c.waitBound("team=a", 4, 60*time.Second)
	c.waitBound("team=b", 4, 30*time.Second)
	// The four replacements wait, and say why, once the scheduler has
	// looked at them.
	framework.Eventually(t, 30*time.Second, "team B's replacements waiting for GPUs", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "team=b")
		if err != nil {
			return false, err
		}
		waiting := 0
		for _, p := range ps {
			for _, cd := range p.Status.Conditions {
				if p.Spec.NodeName == "" && cd.Type == corev1.PodScheduled && cd.Status == corev1.ConditionFalse && strings.Contains(cd.Message, "insufficient nvidia.com/gpu") {
					waiting++
				}
			}
		}
		return waiting == 4, fmt.Errorf("%d of 4 replacements waiting for GPUs", waiting)
	})
	c.waitBound("team=a", 4, time.Second)
	c.waitBound("team=b", 4, time.Second)
	ps, err := c.pods(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range ps {
		if p.Spec.NodeName != "" && p.Spec.NodeName != poolName {
			t.Errorf("%s runs on %s, outside the pool", name, p.Spec.NodeName)
		}
	}
	ev, err := env.Client.CoreV1().Events(c.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Preempted"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Items) != 4 {
		t.Errorf("%d Preempted events, want 4 (one per borrowed GPU, once)", len(ev.Items))
	}
}

// TestPodGroupMinResources: a gang's spec.minResources are what its queue
// must admit before its pods are considered; above the queue's limit the
// gang says what to change.
func TestPodGroupMinResources(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "minres")...)
	q := "capped-" + c.ns
	c.queue(q, "", 0, 4)
	c.run(adapter.Config{})
	gang := func(name string, minGPUs string) {
		pg := &v1alpha1.PodGroup{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "PodGroup"},
			ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
			Spec: v1alpha1.PodGroupSpec{MinMember: 2, Queue: q,
				MinResources: corev1.ResourceList{framework.ResourceGPU: resource.MustParse(minGPUs)}}}
		c.createObj(v1alpha1.PodGroupsResource, c.ns, pg)
		for i := range 2 {
			c.create(c.pod(fmt.Sprintf("%s-%d", name, i)).GPUs(1).Label(v1alpha1.PodGroupLabel, name).Label("gang", name))
		}
	}
	t.Run("above the queue's limit the gang waits and says what to change", func(t *testing.T) {
		gang("huge", "6")
		c.waitCondition("huge-0", "ExceedsQueueLimit", "asks for minResources {nvidia.com/gpu=6}, above queue", 30*time.Second)
		if n, _, err := c.bound(t.Context(), "gang=huge"); err != nil || n != 0 {
			t.Fatalf("%d pods bound (err %v), want 0", n, err)
		}
	})
	t.Run("within the limit it waits for room in the queue", func(t *testing.T) {
		// Two GPUs of the queue's four are used; the gang's pods ask for
		// two, but its minResources for four.
		for i := range 2 {
			c.create(c.pod(fmt.Sprintf("filler-%d", i)).GPUs(1).Label(v1alpha1.QueueLabel, q).Label("filler", "yes"))
		}
		c.waitBound("filler=yes", 2, 30*time.Second)
		gang("four", "4")
		c.waitCondition("four-0", model.UnplacedQueueLimit, "is at its limit", 30*time.Second)
		if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(t.Context(), deleteNow(), listBy("filler=yes")); err != nil {
			t.Fatal(err)
		}
		c.waitBound("gang=four", 2, 30*time.Second)
	})
}
