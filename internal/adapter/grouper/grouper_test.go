package grouper

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// A derived group's name is a valid label value (pods carry it in
// scheduling.gpuplane.io/pod-group) and an object name, however long the
// workload's, and differs for a workload recreated under the same name.
func TestGroupName(t *testing.T) {
	for _, name := range []string{"train", strings.Repeat("a", 253), "x." + strings.Repeat("b-", 100) + "c"} {
		g := GroupName("PyTorchJob", name, "uid-1")
		if errs := validation.IsValidLabelValue(g); len(errs) > 0 {
			t.Errorf("%q: %v", g, errs)
		}
		if errs := validation.IsDNS1123Subdomain(g); len(errs) > 0 {
			t.Errorf("%q: %v", g, errs)
		}
		if g == GroupName("PyTorchJob", name, "uid-2") {
			t.Errorf("%q: the same for two UIDs", g)
		}
	}
	if g := GroupName("Job", "train", "u"); !strings.HasPrefix(g, "job-train-") {
		t.Errorf("GroupName = %q, want job-train-<hash>", g)
	}
}

// Which pods wait for the grouper, before any decision and after each kind.
func TestAwaiting(t *testing.T) {
	g, err := New(Config{SchedulerName: "gpuplane-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: new(true)}
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-0", OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{SchedulerName: "gpuplane-scheduler"}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	never := map[string]*corev1.Pod{
		"another scheduler's": pod(func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" }),
		"bound":               pod(func(p *corev1.Pod) { p.Spec.NodeName = "n1" }),
		"naming its group":    pod(func(p *corev1.Pod) { p.Labels = map[string]string{v1alpha1.PodGroupLabel: "mine"} }),
		"without an owner":    pod(func(p *corev1.Pod) { p.OwnerReferences = nil }),
		"finished":            pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
	}
	for what, p := range never {
		if aw, err := g.Awaiting(p); aw || err != nil {
			t.Errorf("%s pod: awaiting %v, %v; want neither", what, aw, err)
		}
	}
	if aw, _ := g.Awaiting(pod(nil)); !aw {
		t.Fatal("an owned pending pod does not wait before its workload is decided")
	}
	if g.queue.Len() != 1 {
		t.Errorf("%d owners queued, want 1", g.queue.Len())
	}
	decide := func(d *decision) {
		g.mu.Lock()
		d.at = g.now()
		g.decisions["job-uid"] = d
		g.mu.Unlock()
	}
	decide(&decision{group: "job-train-abc"})
	if aw, _ := g.Awaiting(pod(nil)); !aw {
		t.Error("a gang member waits for its label")
	}
	decide(&decision{queue: "team"})
	if aw, _ := g.Awaiting(pod(nil)); !aw {
		t.Error("a pod of a workload naming a queue waits for its queue label")
	}
	if aw, _ := g.Awaiting(pod(func(p *corev1.Pod) { p.Labels = map[string]string{v1alpha1.KueueQueueLabel: "own"} })); aw {
		t.Error("a pod naming its own queue waits for the workload's")
	}
	decide(&decision{})
	if aw, _ := g.Awaiting(pod(nil)); aw {
		t.Error("a pod of a workload with no group and no queue waits")
	}
	decide(&decision{err: errTest})
	if aw, err := g.Awaiting(pod(nil)); !aw || !errors.Is(err, errTest) {
		t.Errorf("= %v, %v; want the pod held with the workload's error", aw, err)
	}
}

var errTest = &permanentError{"spec.minMember: no such key: workers"}

// Decisions of workloads no pod asks about any more are forgotten.
func TestForgetOld(t *testing.T) {
	g, err := New(Config{SchedulerName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	g.decisions["old"] = &decision{at: now.Add(-forgetAfter - time.Second)}
	g.decisions["recent"] = &decision{at: now.Add(-time.Second)}
	g.decisions["held"] = &decision{at: now.Add(-forgetAfter - time.Second), err: errTest}
	g.held["held"] = &heldPods{pods: map[string]waitingPod{"ml/p": {NamespacedName: types.NamespacedName{Namespace: "ml", Name: "p"}}}}
	g.forgetOld()
	if _, ok := g.decisions["old"]; ok {
		t.Error("an old decision was kept")
	}
	for _, k := range []types.UID{"recent", "held"} {
		if _, ok := g.decisions[k]; !ok {
			t.Errorf("decision %s was dropped", k)
		}
	}
}

// A pod that asks after its workload's decision failed is held with the
// others, so that a fixed rule settles it too: before, only the pods that
// asked before the decision were, and a gang's later member kept its
// error for good.
func TestPodAskingAfterAnErrorIsHeldForTheNextDecision(t *testing.T) {
	g, err := New(Config{SchedulerName: "gpuplane-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: new(true)}
	g.mu.Lock()
	g.decisions["job-uid"] = &decision{err: errTest, at: g.now()}
	g.mu.Unlock()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-1", OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{SchedulerName: "gpuplane-scheduler"}}
	if aw, err := g.Awaiting(p); !aw || !errors.Is(err, errTest) {
		t.Fatalf("= %v, %v; want the pod held with the workload's error", aw, err)
	}
	if h := g.held["job-uid"]; h == nil || h.pods["ml/train-1"].Name != "train-1" {
		t.Fatalf("held %+v, want train-1 among the pods held with the error", h)
	}
	// A rule changes: every decision is forgotten and the held pods'
	// workloads are decided again, train-1's among them.
	g.DeleteRule(&v1alpha1.GroupingRule{ObjectMeta: metav1.ObjectMeta{Name: "gone"}})
	if g.queue.Len() != 1 {
		t.Fatalf("%d workloads queued after the rule changed, want train-1's", g.queue.Len())
	}
	if k, _ := g.queue.Get(); k.UID != "job-uid" {
		t.Fatalf("queued %+v, want the Job", k)
	}
}
