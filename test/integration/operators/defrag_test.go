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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
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
	nodeA, nodeB := c.fragment()
	_, uidA, _ := c.podOn(t.Context(), "a-0")
	_, uidB, _ := c.podOn(t.Context(), "b-0")
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
	moved := "a-0"
	if ub != uidB {
		moved = "b-0"
	}
	c.movedFor(moved, "pod/"+c.ns+"/big")
}

// fragment makes the two nodes of a cluster hold one movable 4-GPU
// workload each, a-0 on nodeA and b-0 on nodeB: 8 GPUs free, no node
// with 8. A filler beside a keeps b off a's node, and goes.
func (c *cluster) fragment() (nodeA, nodeB string) {
	t := c.t
	t.Helper()
	c.statefulSet("a", 4)
	nodeA, _, _ = c.landed("a-0")
	c.gpuPod("filler", nodeA, 4)
	framework.Eventually(t, 60*time.Second, "the filler bound beside a", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "filler")
		return err == nil && n == nodeA, fmt.Errorf("on %q (%w)", n, err)
	})
	c.statefulSet("b", 4)
	framework.Eventually(t, 60*time.Second, "b bound on the other node", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "b-0")
		return err == nil && n != "" && n != nodeA, fmt.Errorf("on %q (%w)", n, err)
	})
	c.remove("filler")
	nodeB, _, _ = c.podOn(t.Context(), "b-0")
	return nodeA, nodeB
}

// landed waits for pod name (a StatefulSet's, or one made by the test) to
// be bound, and returns its node, its UID and the test's other nodes.
func (c *cluster) landed(name string) (node, uid string, others []string) {
	t := c.t
	t.Helper()
	framework.Eventually(t, 60*time.Second, name+" bound", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, name)
		return err == nil && n != "", err
	})
	node, uid, _ = c.podOn(t.Context(), name)
	nodes, err := env.Client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: "test-ns=" + c.ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Name != node {
			others = append(others, n.Name)
		}
	}
	return node, uid, others
}

// remove deletes pod name at once, as a pod that ends.
func (c *cluster) remove(name string) {
	c.t.Helper()
	if err := env.Client.CoreV1().Pods(c.ns).Delete(c.t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		c.t.Fatal(err)
	}
}

// gpuPod creates a pod of gpus GPUs that did not opt in to moves, on
// the test's nodes, only on node when node is not "".
func (c *cluster) gpuPod(name, node string, gpus int) {
	c.t.Helper()
	c.classPod(name, node, "", gpus)
}

// classPod is gpuPod of PriorityClass class ("": none).
func (c *cluster) classPod(name, node, class string, gpus int) {
	c.t.Helper()
	b := framework.Pod(c.ns, name).SchedulerName(c.scheduler).GPUs(gpus).NodeSelector("test-ns", c.ns)
	if node != "" {
		b.NodeSelector("kubernetes.io/hostname", node)
	}
	p := b.Obj()
	p.Spec.PriorityClassName = class
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(c.t.Context(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// movedFor waits for the Preempted event that says pod was evicted to be
// moved (defragment) for group, as the core names it.
func (c *cluster) movedFor(pod, group string) {
	c.t.Helper()
	framework.Eventually(c.t, 30*time.Second, "an eviction event saying "+pod+" moved for "+group, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Preempted,involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "("+model.EvictDefragment+") to make room for "+group) {
				return true, nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Errorf("Preempted events of %s %q, none for the move", pod, seen)
	})
}

// podGroupSays is the message of PodGroup name's Schedulable condition
// when it is False: what the scheduler tells the gang while it waits.
func (c *cluster) podGroupSays(ctx context.Context, name string) (string, error) {
	u, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	var pg v1alpha1.PodGroup
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
		return "", err
	}
	cond := meta.FindStatusCondition(pg.Status.Conditions, v1alpha1.ConditionSchedulable)
	if cond == nil || cond.Status != metav1.ConditionFalse {
		return "", fmt.Errorf("PodGroup %s has Schedulable %+v, not False", name, cond)
	}
	return cond.Message, nil
}

// A gang whose pod needs a whole node, waiting while no node is whole,
// has the node cheapest to empty kept for it once it has waited
// --defrag-drain-after: the node where only 2 GPUs may not move, not
// those where 4 may not. Its PodGroup and its pods say so; a new pod that
// fits that node best goes elsewhere; and once the pod that may not move
// ends, the movable workload there is moved off (evicted for the gang,
// made again and bound where the scheduler placed it) and the gang binds
// in the node it left.
func TestDrainKeepsANodeForAWholeNodeGang(t *testing.T) {
	c := newCluster(t, 3)
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, DefragMovesPerHour: 4, DefragDrainAfter: 2 * time.Second})
	// m (3 GPUs, movable) lands first, on a node of its choosing; then
	// pods that may not move fill the nodes: 2 GPUs beside m, 4 on each
	// other node. No node is whole; the first is cheapest to empty.
	c.statefulSet("m", 3)
	kept, uidM, others := c.landed("m-0")
	c.gpuPod("fixed", kept, 2)
	c.gpuPod("fixed-1", others[0], 4)
	c.gpuPod("fixed-2", others[1], 4)
	framework.Eventually(t, 60*time.Second, "the pods that may not move bound", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"fixed", "fixed-1", "fixed-2"} {
			n, _, err := c.podOn(ctx, name)
			if err != nil {
				return false, err
			}
			if n == "" {
				return false, fmt.Errorf("%s waits: %s", name, c.waiting(ctx, "!"+v1alpha1.PodGroupLabel))
			}
		}
		return true, nil
	})
	// The gang: a pod of a whole node and a pod of one GPU, all or none.
	pg, err := runtime.DefaultUnstructuredConverter.ToUnstructured(build.PodGroup(c.ns, "big", 2).Obj())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).Create(t.Context(), &unstructured.Unstructured{Object: pg}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, gpus := range map[string]int{"big-0": 8, "big-1": 1} {
		p := framework.Pod(c.ns, name).SchedulerName(c.scheduler).GPUs(gpus).NodeSelector("test-ns", c.ns).Label(v1alpha1.PodGroupLabel, "big").Obj()
		if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Once it has waited, the gang is told which node is kept for it
	// and what it waits for there.
	says := "node " + kept + " is kept free for it: it waits for the pods there that may not move (2 GPUs) to end, then the movable ones (3 GPUs) are moved off"
	framework.Eventually(t, 60*time.Second, "the gang told "+kept+" is kept for it", func(ctx context.Context) (bool, error) {
		msg, err := c.podGroupSays(ctx, "big")
		if err != nil {
			return false, err
		}
		if !strings.Contains(msg, says) {
			return false, fmt.Errorf("PodGroup says %q", msg)
		}
		for _, name := range []string{"big-0", "big-1"} {
			p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got := framework.SchedulerSays(p); !strings.Contains(got, says) {
				return false, fmt.Errorf("%s: %s", name, got)
			}
		}
		return true, nil
	})
	// A pod of 3 GPUs fits the kept node best (3 GPUs free there, 4 on
	// the others): it goes to another.
	c.gpuPod("small", "", 3)
	framework.Eventually(t, 60*time.Second, "small bound", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "small")
		if err != nil {
			return false, err
		}
		return n != "", fmt.Errorf("small waits: %s", c.waiting(ctx, "!"+v1alpha1.PodGroupLabel))
	})
	if n, _, _ := c.podOn(t.Context(), "small"); n == kept {
		t.Fatalf("small bound on %s, the node kept for the gang", n)
	}
	// The pod that may not move ends: m is moved off and the gang binds
	// where it was.
	c.remove("fixed")
	framework.Eventually(t, 120*time.Second, "big-0 bound on "+kept+", m made again elsewhere", func(ctx context.Context) (bool, error) {
		n0, _, err0 := c.podOn(ctx, "big-0")
		n1, _, err1 := c.podOn(ctx, "big-1")
		nm, um, errM := c.podOn(ctx, "m-0")
		if err := errors.Join(err0, err1, errM); err != nil {
			return false, err
		}
		if n0 != kept || n1 == "" || nm == "" || nm == kept || um == uidM {
			return false, fmt.Errorf("big-0 on %q, big-1 on %q, m-0 (%s) on %q: %s", n0, n1, um, nm, c.waiting(ctx, v1alpha1.PodGroupLabel+"=big"))
		}
		return true, nil
	})
	c.movedFor("m-0", "pg/"+c.ns+"/big")
}

// A node kept for a whole-node pod is kept from every other pod for as
// long as it is kept, a preemptor's included. urgent (the low class, above
// the default priority) fits only by preempting fixed, the 2 GPUs on the
// kept node: the other node is full with a pod of the high class. It
// evicts nothing, and its message counts the node as kept.
func TestDrainKeepsTheNodeFromAPreemptor(t *testing.T) {
	c := newCluster(t, 2)
	low, high := c.priorities()
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, DefragMovesPerHour: 4, DefragDrainAfter: 2 * time.Second})
	c.gpuPod("fixed", "", 2)
	kept, uidFixed, others := c.landed("fixed")
	c.classPod("full", others[0], high, 8)
	framework.Eventually(t, 60*time.Second, "full bound on "+others[0], func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "full")
		return err == nil && n == others[0], fmt.Errorf("on %q (%w)", n, err)
	})
	c.gpuPod("big", "", 8)
	says := func(name, want string) {
		t.Helper()
		framework.Eventually(t, 60*time.Second, name+" told "+want, func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got := framework.SchedulerSays(p)
			return strings.Contains(got, want), fmt.Errorf("%s: %s", name, got)
		})
	}
	says("big", "node "+kept+" is kept free for it")
	c.classPod("urgent", "", low, 2)
	says("urgent", placement.FilterKept)
	// Cycles go on: fixed stays, and nothing says it was preempted.
	time.Sleep(time.Second)
	if n, uid, err := c.podOn(t.Context(), "fixed"); err != nil || n != kept || uid != uidFixed {
		t.Fatalf("fixed on %q (uid %s, was %s): %v", n, uid, uidFixed, err)
	}
	evs, err := env.Client.CoreV1().Events(c.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Preempted,involvedObject.name=fixed"})
	if err != nil || len(evs.Items) > 0 {
		t.Fatalf("fixed has Preempted events %+v (%v)", evs, err)
	}
	if n, _, _ := c.podOn(t.Context(), "urgent"); n != "" {
		t.Fatalf("urgent bound on %s", n)
	}
}
