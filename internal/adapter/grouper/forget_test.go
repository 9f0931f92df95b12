package grouper

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"
)

// countingQueue counts the workloads asked for again later.
type countingQueue struct {
	workqueue.TypedRateLimitingInterface[ownerKey]
	after int
}

func (q *countingQueue) AddAfter(k ownerKey, d time.Duration) {
	q.after++
	q.TypedRateLimitingInterface.AddAfter(k, d)
}

// Pods held with their workload's error and then deleted are forgotten:
// the workload is asked for no more and its decision goes in time. Before,
// a workload whose group could not be made kept its pods held after they
// were gone and was looked up again every decisionTTL for good.
func TestDeletedPodsOfAFailedWorkloadAreForgotten(t *testing.T) {
	const ns = "ml"
	pgGVK := schema.FromAPIVersionAndKind(WorkloadPodGroupAPIVersion, "PodGroup")
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(pgGVK, meta.RESTScopeNamespace)
	gvr, _ := meta.UnsafeGuessKindToResource(pgGVK)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "PodGroupList"})
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{SchedulerName: "gpuplane-scheduler", SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: new("missing")}}}
	}
	p0, p1 := pod("w-0"), pod("w-1")
	g, err := New(Config{SchedulerName: "gpuplane-scheduler", Client: fake.NewClientset(p0, p1), Dynamic: dyn, Mapper: resettable{mapper}, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	q := &countingQueue{TypedRateLimitingInterface: g.queue}
	g.queue = q
	defer q.ShutDown() // and the retries queued with it
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	g.OnSettled(func(string, string) {})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, _ := g.keyOf(p0)

	for _, p := range []*corev1.Pod{p0, p1} {
		if aw, err := g.Awaiting(p); !aw || err != nil {
			t.Fatalf("%s: awaiting %v, %v; want it to wait", p.Name, aw, err)
		}
	}
	if err := g.process(ctx, k); err != nil {
		t.Fatal(err)
	}
	if h := g.held[k.UID]; h == nil || len(h.pods) != 2 || q.after != 1 {
		t.Fatalf("held %+v, asked again later %d times; want both pods held and the workload asked again", h, q.after)
	}

	// One pod goes: the other is still held.
	g.Forget(p0)
	if h := g.held[k.UID]; h == nil || len(h.pods) != 1 {
		t.Fatalf("held %+v after w-0 was deleted; want w-1 alone", h)
	}
	// The other goes: nothing is held, the next decision (the retry)
	// asks for nothing more, and the decision is forgotten in time.
	g.Forget(p1)
	if h := g.held[k.UID]; h != nil {
		t.Fatalf("held %+v after both pods were deleted", h)
	}
	now = now.Add(decisionTTL + time.Second)
	if err := g.process(ctx, k); err != nil {
		t.Fatal(err)
	}
	if q.after != 1 {
		t.Fatalf("with no pod left the workload was asked for again later (%d times in all)", q.after)
	}
	// A pod made again (a Job replaces its pods) is held with the error,
	// and the retry starts again for it.
	p2 := pod("w-2")
	if aw, err := g.Awaiting(p2); !aw || err == nil {
		t.Fatalf("w-2: awaiting %v, %v; want it held with the workload's error", aw, err)
	}
	if q.after != 2 {
		t.Fatalf("w-2 held with no retry to come (asked again later %d times in all)", q.after)
	}
	g.Forget(p2)
	now = now.Add(forgetAfter + time.Second)
	g.forgetOld()
	if _, ok := g.decisions[k.UID]; ok {
		t.Fatal("the failed workload's decision was kept with no pod left")
	}
}
