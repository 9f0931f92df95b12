package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// policyQueue creates q (deleted when the test ends).
func (c *cluster) policyQueue(q *v1alpha1.Queue) {
	c.t.Helper()
	q.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Queue"}
	c.createObj(v1alpha1.QueuesResource, "", q)
	c.t.Cleanup(func() {
		if err := c.dyn.Resource(v1alpha1.QueuesResource).Delete(context.Background(), q.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.t.Errorf("deleting queue %s: %v", q.Name, err)
		}
	})
}

// prioritized creates a pod of gpus GPUs in queue q with PriorityClass
// class, labelled app=app.
func (c *cluster) prioritized(name, q, class, app string, gpus int, annotations map[string]string) {
	c.t.Helper()
	p := c.pod(name).GPUs(gpus).Label("app", app).Label(v1alpha1.QueueLabel, q).Obj()
	p.Spec.PriorityClassName = class
	for k, v := range annotations {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
	c.createPod(p)
}

// nextSecond waits until the clock has passed the second of t: object
// timestamps have a second's resolution, and two events the test orders
// must not share one.
func nextSecond(t *testing.T, after time.Time) {
	t.Helper()
	framework.Eventually(t, 5*time.Second, "the clock past "+after.Format(time.RFC3339), func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(after), nil
	})
}

// A queue's minimum runtime keeps its young workloads running whatever
// waits; without it the same preemptor evicts at once.
func TestMinimumRuntimeHoldsOffPreemption(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "minrun")...)
	q := "minrun-" + c.ns
	c.policyQueue(build.Queue(q).MinRuntime(time.Hour).Obj())
	low, high := "mr-low-"+c.ns, "mr-high-"+c.ns
	priorityClasses(t, map[string]int32{low: 100, high: 1000})
	for i := range 2 {
		c.prioritized(fmt.Sprintf("low-%d", i), q, low, "low", 4, nil)
	}
	c.run(adapter.Config{})
	c.waitBound("app=low", 2, 30*time.Second)
	// Both stay until the test lifts the minimum runtime.
	var keep atomic.Int32
	keep.Store(2)
	c.alwaysPods("no workload younger than the queue's minimum runtime evicted", "app=low", atLeastRunning(func() int { return int(keep.Load()) }))
	c.prioritized("urgent", q, high, "high", 4, nil)
	c.waitCondition("urgent", corev1.PodReasonUnschedulable, "younger than their minimum runtime", 30*time.Second)
	if n, _, err := c.bound(t.Context(), "app=low"); err != nil || n != 2 {
		t.Fatalf("%d low-priority pods bound (err %v), want both: they are younger than an hour", n, err)
	}
	// Lifting the minimum runtime lets the waiting preemptor in.
	keep.Store(1)
	u, err := c.dyn.Resource(v1alpha1.QueuesResource).Get(t.Context(), q, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(u.Object, "spec", "minRuntime")
	if _, err := c.dyn.Resource(v1alpha1.QueuesResource).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBound("app=high", 1, 60*time.Second)
	c.waitBound("app=low", 1, 30*time.Second)
}

// A victim is told first: its PreemptionNotice condition (and event)
// appear while it still runs, and only then is it deleted, with its
// queue's grace period.
func TestPreemptionNoticeThenEviction(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "notice")...)
	q := "notice-" + c.ns
	const grace = 7 // not the pods' default of 30
	c.policyQueue(build.Queue(q).PreemptionGrace(grace).Obj())
	low, high := "nt-low-"+c.ns, "nt-high-"+c.ns
	priorityClasses(t, map[string]int32{low: 100, high: 1000})
	c.prioritized("victim", q, low, "low", 8, nil)
	c.run(adapter.Config{})
	c.waitBound("app=low", 1, 30*time.Second)

	// Every version of the victim, from now on.
	w, err := env.Client.CoreV1().Pods(c.ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=victim"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var versions []*corev1.Pod
	deleted := false
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			versions = append(versions, p)
			deleted = deleted || ev.Type == watch.Deleted
			mu.Unlock()
		}
	}()
	c.prioritized("urgent", q, high, "high", 8, nil)
	framework.Eventually(t, 60*time.Second, "the victim deleted with its queue's grace", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range versions {
			if p.DeletionTimestamp != nil {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d versions seen, none being deleted", len(versions))
	})
	mu.Lock()
	seen := slices.Clone(versions)
	mu.Unlock()
	noticed := -1
	for k, p := range seen {
		for _, cd := range p.Status.Conditions {
			if cd.Type == v1alpha1.ConditionPreemptionNotice && cd.Status == corev1.ConditionTrue && noticed < 0 {
				noticed = k
				if cd.Reason != "Preempt" || !strings.Contains(cd.Message, "urgent") || !strings.Contains(cd.Message, fmt.Sprintf("%ds", grace)) {
					t.Errorf("notice %+v, want reason Preempt naming the preemptor and the grace", cd)
				}
			}
		}
	}
	if noticed < 0 {
		t.Fatalf("no version of the victim carries the PreemptionNotice condition (%d versions)", len(seen))
	}
	if seen[noticed].DeletionTimestamp != nil {
		t.Errorf("the notice came with the deletion, not before it")
	}
	for _, p := range seen {
		if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds != grace && *p.DeletionGracePeriodSeconds != 0 {
			t.Errorf("the victim was deleted with a grace of %ds, want its queue's %ds", *p.DeletionGracePeriodSeconds, grace)
		}
	}
	graced := slices.ContainsFunc(seen, func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == grace
	})
	if !graced {
		t.Errorf("no version of the victim shows a deletion with its queue's grace of %ds", grace)
	}
	ev, err := env.Client.CoreV1().Events(c.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ConditionPreemptionNotice + ",involvedObject.name=victim"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Items) == 0 {
		t.Error("no PreemptionNotice event on the victim")
	}
	c.waitBound("app=high", 1, 60*time.Second)
}

// Two preemptors that fit in the GPUs one victim holds: one evicts it,
// and the other waits for it in the GPUs it frees beyond the first one's,
// bound there only once it is gone. No GPU is held by two pods at any
// time, the exiting victim included, and the other low-priority pod
// stays.
func TestNoPodBoundOnAnExitingVictimsGPUs(t *testing.T) {
	c, q, low, high := twoPreemptors(t, "vacate", 2)
	for i := range 2 {
		c.prioritized(fmt.Sprintf("low-%d", i), q, low, "low", 4, nil)
	}
	stop := c.run(adapter.Config{})
	c.waitBound("app=low", 2, 30*time.Second)
	c.alwaysPods("no GPU held by two pods", "", exclusiveGPUs)
	// Both wait before the scheduler starts again, so that one cycle
	// decides for both.
	stop()
	c.prioritized("urgent-a", q, high, "high", 2, nil)
	c.prioritized("urgent-b", q, high, "high", 2, nil)
	c.run(adapter.Config{})
	c.bothBoundForOneVictim()
}

// A pod evicted for a preemptor that repels it still runs until it
// exits, and another pod that repels it is not bound beside it meanwhile,
// though it fits there and could evict a third pod (which would not help
// it): both repelling pods are bound once the victim is gone, and the
// third pod stays.
func TestEvictedPodStillRepelsUntilItExits(t *testing.T) {
	c, q, low, high := twoPreemptors(t, "repel", 0)
	for _, app := range []string{"v", "w"} {
		c.prioritized(app, q, low, app, 1, nil)
	}
	stop := c.run(adapter.Config{})
	c.waitBound("app in (v,w)", 2, 30*time.Second)
	c.alwaysPods("no pod bound beside v that repels it", "", func(ps map[string]*corev1.Pod) error {
		v := ps["v"]
		if v == nil || v.Spec.NodeName == "" {
			return nil
		}
		for name, p := range ps {
			if p.Spec.NodeName == v.Spec.NodeName && p.Spec.Affinity != nil && p.Spec.Affinity.PodAntiAffinity != nil {
				return fmt.Errorf("%s bound on %s beside v, which it repels", name, p.Spec.NodeName)
			}
		}
		return nil
	})
	// Both wait before the scheduler starts again, so that one cycle
	// decides for both: p evicts v, and q comes after it.
	stop()
	mid := "repel-mid-" + c.ns // above v and w, below p: q may evict w
	priorityClasses(t, map[string]int32{mid: 500})
	for name, class := range map[string]string{"p": high, "q": mid} {
		p := c.pod(name).GPUs(1).Label("app", "shy").Label(v1alpha1.QueueLabel, q).Obj()
		p.Spec.PriorityClassName = class
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{appTerm("kubernetes.io/hostname", "v")}}}
		c.createPod(p)
	}
	c.run(adapter.Config{})
	c.waitBound("app=shy", 2, 60*time.Second)
	if n, _, err := c.bound(t.Context(), "app=w"); err != nil || n != 1 {
		t.Fatalf("w bound: %d (err %v), want it left running", n, err)
	}
	c.failIfBroken()
}

// twoPreemptors is a cluster of one 8-GPU node named after prefix, a
// Queue q whose evicted pods get grace seconds to exit (0: the pods'
// own), and PriorityClasses low (100) and high (1000): the pods that run
// first, and the preemptors that come for their room.
func twoPreemptors(t *testing.T, prefix string, grace int64) (c *cluster, q, low, high string) {
	c = newCluster(t, gpuNodes(1, prefix)...)
	q = prefix + "-" + c.ns
	qb := build.Queue(q)
	if grace > 0 {
		qb = qb.PreemptionGrace(grace)
	}
	c.policyQueue(qb.Obj())
	low, high = prefix+"-low-"+c.ns, prefix+"-high-"+c.ns
	priorityClasses(t, map[string]int32{low: 100, high: 1000})
	return c, q, low, high
}

// beingDeleted lists, in order, the pods of ps being deleted.
func beingDeleted(ps map[string]*corev1.Pod) []string {
	var out []string
	for name, p := range ps {
		if p.DeletionTimestamp != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// bothBoundForOneVictim waits for both preemptors (app=high) to be bound
// and fails the test unless one low-priority pod still runs: one victim
// made room for both.
func (c *cluster) bothBoundForOneVictim() {
	c.t.Helper()
	c.waitBound("app=high", 2, 60*time.Second)
	if n, _, err := c.bound(c.t.Context(), "app=low"); err != nil || n != 1 {
		c.t.Fatalf("%d low-priority pods bound (err %v), want 1: one victim made room for both", n, err)
	}
	c.failIfBroken()
}

// A preemptor that arrives while another one's victim is still exiting,
// and fits in the room that victim leaves, waits for it: it evicts no
// second pod, binds once the victim is gone, and no GPU is ever held by
// two pods. A finalizer keeps the victim being deleted until the test
// lets it go.
func TestLaterPreemptorWaitsForAnExitingVictim(t *testing.T) {
	c, q, low, high := twoPreemptors(t, "exiting", 0)
	for i := range 2 {
		name := fmt.Sprintf("low-%d", i)
		p := c.pod(name).GPUs(4).Label("app", "low").Label(v1alpha1.QueueLabel, q).Obj()
		p.Spec.PriorityClassName, p.Finalizers = low, []string{holdFinalizer}
		c.createPod(p)
		t.Cleanup(func() { releaseFinalizer(c, name) })
	}
	c.run(adapter.Config{})
	c.waitBound("app=low", 2, 30*time.Second)
	c.alwaysPods("no GPU held by two pods", "", exclusiveGPUs)
	c.alwaysPods("one low-priority pod evicted at most", "app=low", func(ps map[string]*corev1.Pod) error {
		if deleting := beingDeleted(ps); len(deleting) > 1 {
			return fmt.Errorf("pods %v all evicted, where one made room for both preemptors", deleting)
		}
		return nil
	})
	c.prioritized("urgent-a", q, high, "high", 2, nil)
	var victim string
	framework.Eventually(t, 30*time.Second, "a low-priority pod being deleted", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "app=low")
		if err != nil {
			return false, err
		}
		if deleting := beingDeleted(ps); len(deleting) > 0 {
			victim = deleting[0]
			return true, nil
		}
		return false, fmt.Errorf("%d low-priority pods, none being deleted", len(ps))
	})
	c.prioritized("urgent-b", q, high, "high", 2, nil)
	c.waitCondition("urgent-b", model.UnplacedWaitingForVictims, "evicted pod", 30*time.Second)
	// An eviction goes out after the cycle that decides it: a second one
	// would land while the victim still holds its room, and break the
	// invariant above, within this window.
	quiet := time.Now().Add(2 * time.Second)
	framework.Eventually(t, 10*time.Second, "no second eviction while "+victim+" exits", func(context.Context) (bool, error) {
		c.failIfBroken()
		return time.Now().After(quiet), nil
	})
	releaseFinalizer(c, victim)
	c.bothBoundForOneVictim()
}

// Among victims of one priority, the one that loses the fewest GPU-hours
// goes: the older workload that checkpointed a moment ago, not the newer
// one that never did (which age alone would choose).
func TestCheckpointAwareVictimChoice(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "ckpt")...)
	q := "ckpt-" + c.ns
	c.policyQueue(build.Queue(q).Obj())
	low, high := "ck-low-"+c.ns, "ck-high-"+c.ns
	priorityClasses(t, map[string]int32{low: 100, high: 1000})
	c.run(adapter.Config{})
	c.prioritized("saved", q, low, "low", 4, nil)
	c.waitBound("app=low", 1, 30*time.Second)
	saved, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), "saved", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nextSecond(t, saved.CreationTimestamp.Time)
	c.prioritized("unsaved", q, low, "low", 4, nil)
	c.waitBound("app=low", 2, 30*time.Second)
	unsaved, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), "unsaved", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !unsaved.CreationTimestamp.After(saved.CreationTimestamp.Time) {
		t.Fatalf("unsaved created %v, not after saved's %v", unsaved.CreationTimestamp, saved.CreationTimestamp)
	}
	// saved checkpoints after unsaved started: it has less to lose.
	nextSecond(t, unsaved.CreationTimestamp.Time)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.LastCheckpointAnnotation, time.Now().UTC().Format(time.RFC3339))
	if _, err := env.Client.CoreV1().Pods(c.ns).Patch(t.Context(), "saved", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.alwaysPods("the workload that never checkpointed keeps running", "app=low", func(ps map[string]*corev1.Pod) error {
		if p := ps["unsaved"]; p == nil || p.DeletionTimestamp != nil {
			return fmt.Errorf("unsaved was evicted, though saved loses less")
		}
		return nil
	})
	c.prioritized("urgent", q, high, "high", 4, nil)
	c.waitBound("app=high", 1, 60*time.Second)
	framework.Eventually(t, 30*time.Second, "saved evicted", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, "saved", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("saved still there (being deleted: %v)", p.DeletionTimestamp != nil)
	})
}
