package adapter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// TestMembershipDialects checks that pods written for other schedulers join
// the group and queue they name, and that what is ambiguous waits with a
// reason instead of being guessed.
func TestMembershipDialects(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	c.upsertNode(build.Node("n1").Resources(rl("nvidia.com/gpu", "8", "cpu", "32", "memory", "64Gi")).Obj())
	for _, q := range []string{"batch", "research", "infer"} {
		c.upsertQueue(build.Queue(q).GPUs("", "").Obj())
	}
	c.upsertPodGroup(build.PodGroup("ml", "volcano-job", 2).Obj())
	c.upsertPodGroup(build.PodGroup("ml", "split", 2).Obj())
	c.upsertPodGroup(build.PodGroup("ml", "pinned", 1).Queue("batch").Obj())
	add := func(name string, labels, annotations map[string]string) {
		p := newPod("ml", name).GPUs(1).Obj()
		p.Labels, p.Annotations = labels, annotations
		c.upsertPod(p)
	}
	add("kai", map[string]string{v1alpha1.KAIQueueLabel: "research"}, nil)
	add("volcano-queue", nil, map[string]string{v1alpha1.VolcanoQueueAnnotation: "infer"})
	add("vc-0", nil, map[string]string{v1alpha1.VolcanoGroupAnnotation: "volcano-job", v1alpha1.VolcanoQueueAnnotation: "batch"})
	add("vc-1", nil, map[string]string{v1alpha1.VolcanoGroupAnnotation: "volcano-job"})
	add("agree", map[string]string{v1alpha1.QueueLabel: "batch", v1alpha1.KueueQueueLabel: "batch"}, nil)
	add("disagree", map[string]string{v1alpha1.QueueLabel: "batch", v1alpha1.KAIQueueLabel: "research"}, nil)
	add("two-groups", map[string]string{v1alpha1.PodGroupLabel: "a"}, map[string]string{v1alpha1.VolcanoGroupAnnotation: "b"})
	add("bad-name", nil, map[string]string{v1alpha1.VolcanoQueueAnnotation: "Not A Name"})
	add("split-0", map[string]string{v1alpha1.PodGroupLabel: "split", v1alpha1.QueueLabel: "batch"}, nil)
	add("split-1", map[string]string{v1alpha1.PodGroupLabel: "split", v1alpha1.KueueQueueLabel: "research"}, nil)
	add("pinned-0", map[string]string{v1alpha1.PodGroupLabel: "pinned", v1alpha1.QueueLabel: "infer"}, nil)

	in := c.snapshot(newBuilder(v1alpha1.SchedulerName, -1, logr.Discard()), newRefusals(), time.Unix(100, 0))
	queues := map[string]string{}
	for _, g := range in.snap.Pending {
		queues[g.Name] = g.Queue
	}
	for group, want := range map[string]string{
		"pod/ml/kai": "research", "pod/ml/volcano-queue": "infer", "pg/ml/volcano-job": "batch", "pod/ml/agree": "batch",
		"pg/ml/pinned": "batch", // the PodGroup's spec.queue comes first
	} {
		if got, ok := queues[group]; !ok || got != want {
			t.Errorf("%s: queue %q (pending %v), want %q", group, got, ok, want)
		}
	}
	if g := in.groups["pg/ml/volcano-job"]; g == nil || len(g.pending) != 2 {
		t.Errorf("Volcano's group annotation: group %+v, want both pods in PodGroup volcano-job", g)
	}
	bad := map[string]*BadInputError{}
	for _, pi := range in.badPods {
		bad[pi.key] = pi.bad
	}
	for pod, want := range map[string]string{"ml/disagree": "ConflictingQueues", "ml/two-groups": "ConflictingPodGroups", "ml/bad-name": "InvalidName"} {
		if e := bad[pod]; e == nil || e.Reason != want {
			t.Errorf("%s: %v, want reason %s", pod, e, want)
		}
	}
	if e := bad["ml/disagree"]; e != nil && !strings.Contains(e.Msg, v1alpha1.KAIQueueLabel) {
		t.Errorf("conflict message %q does not name the label to change", e.Msg)
	}
	for group, want := range map[string]string{"pg/ml/split": "pod ml/split-1's label " + v1alpha1.KueueQueueLabel} {
		g := in.groups[group]
		if g == nil || g.held == nil || g.held.Reason != "QueueMismatch" || !strings.Contains(g.held.Msg, want) {
			t.Errorf("%s: held %v, want QueueMismatch naming %q", group, g.held, want)
		}
		if _, ok := queues[group]; ok {
			t.Errorf("%s: offered to the core despite its pods disagreeing", group)
		}
	}
}

// TestQueueNamespaceSelector checks that a queue admits only the namespaces
// its selector, and its parents', match, and follows namespace labels.
func TestQueueNamespaceSelector(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	c.upsertNode(build.Node("n1").Resources(rl("nvidia.com/gpu", "8", "cpu", "32", "memory", "64Gi")).Obj())
	teamA := build.Queue("team-a").GPUs("4", "").Obj()
	teamA.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	child := build.Queue("team-a-dev").Parent("team-a").GPUs("2", "").Obj()
	prod := build.Queue("team-a-prod").Parent("team-a").GPUs("2", "").Obj()
	bOnly := build.Queue("b-only").GPUs("", "").Obj()
	bOnly.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}
	open := build.Queue("open").GPUs("", "").Obj()
	open.Spec.NamespaceSelector = &metav1.LabelSelector{}
	broken := build.Queue("broken").GPUs("", "").Obj()
	broken.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
	for _, q := range []*v1alpha1.Queue{teamA, child, prod, bOnly, open, broken} {
		c.upsertQueue(q)
	}
	c.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a-train", Labels: map[string]string{"team": "a"}}})
	c.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b-train", Labels: map[string]string{"team": "b"}}})
	add := func(ns, name, q string) {
		p := newPod(ns, name).GPUs(1).Obj()
		p.Labels = map[string]string{v1alpha1.QueueLabel: q}
		c.upsertPod(p)
	}
	add("a-train", "ok", "team-a-prod")
	add("a-train", "ok-child", "team-a-dev")
	add("a-train", "not-b", "b-only")
	add("b-train", "intruder", "team-a-prod")
	add("b-train", "intruder-child", "team-a-dev")
	add("b-train", "anyone", "open")
	add("b-train", "to-broken", "broken")

	b := newBuilder(v1alpha1.SchedulerName, -1, logr.Discard())
	in := c.snapshot(b, newRefusals(), time.Unix(100, 0))
	want := map[string]string{
		"pod/a-train/ok": "", "pod/a-train/ok-child": "", "pod/b-train/anyone": "", "pod/a-train/not-b": "QueueNotAllowed",
		"pod/b-train/intruder": "QueueNotAllowed", "pod/b-train/intruder-child": "QueueNotAllowed", "pod/b-train/to-broken": "UnknownQueue",
	}
	for group, reason := range want {
		g := in.groups[group]
		switch {
		case g == nil:
			t.Errorf("%s: no group", group)
		case reason == "" && g.held != nil:
			t.Errorf("%s: held %v, want admitted", group, g.held)
		case reason != "" && (g.held == nil || g.held.Reason != reason):
			t.Errorf("%s: held %v, want %s", group, g.held, reason)
		}
	}
	if g := in.groups["pod/b-train/intruder-child"]; g != nil && g.held != nil && !strings.Contains(g.held.Msg, `queue "team-a" admits only`) {
		t.Errorf("a parent's selector should be named: %s", g.held.Msg)
	}
	if e := in.queueErrs["broken"]; e == nil || !strings.Contains(e.Msg, "spec.namespaceSelector") {
		t.Errorf("broken selector: %v, want an InvalidQueue naming spec.namespaceSelector", e)
	}

	// Relabelling the namespace admits its pods on the next cycle.
	c.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b-train", Labels: map[string]string{"team": "a"}}})
	in = c.snapshot(b, newRefusals(), time.Unix(101, 0))
	if g := in.groups["pod/b-train/intruder"]; g == nil || g.held != nil {
		t.Errorf("after relabelling: %+v, want admitted", g)
	}
}

// mirrorGrouping answers as the grouper does for pods of a Volcano
// PodGroup it mirrored: wait until the mirror is seen.
type mirrorGrouping struct{}

func (mirrorGrouping) Awaiting(*corev1.Pod) (bool, error) { return true, nil }
func (mirrorGrouping) Forget(*corev1.Pod)                 {}

// A pod that names a Volcano PodGroup the grouping mirrored waits, with no
// condition, until the cache has the mirrored PodGroup, then is scheduled
// in it: it never says PodGroupNotFound in between.
func TestVolcanoPodWaitsForItsMirror(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.cache.grouping = mirrorGrouping{}
	for i := range 2 {
		p := newPod("ns", fmt.Sprint("vc-", i)).GPUs(1).Obj()
		p.Annotations = map[string]string{v1alpha1.VolcanoGroupAnnotation: "train"}
		f.cache.upsertPod(p)
	}
	f.cycle()
	if len(f.status.conditions) != 0 || len(f.api.binds) != 0 {
		t.Fatalf("conditions %v, binds %v before the mirror is seen; want neither", f.status.conditions, f.api.binds)
	}
	// A PodGroup of that name made by hand is not the mirror: the pods
	// still wait for the grouping's answer.
	f.cache.upsertPodGroup(podGroup("train", 2))
	f.cycle()
	if len(f.status.conditions) != 0 || len(f.api.binds) != 0 {
		t.Fatalf("conditions %v, binds %v with a hand-made PodGroup; want neither", f.status.conditions, f.api.binds)
	}
	mirror := podGroup("train", 2)
	mirror.Labels = map[string]string{v1alpha1.DerivedLabel: "true"}
	mirror.Generation = 2
	f.cache.upsertPodGroup(mirror)
	f.cycle()
	if len(f.api.binds) != 2 {
		t.Fatalf("binds %v, conditions %v; want the gang of 2 bound", f.api.binds, f.status.conditions)
	}
}

// A bound member of a gang that names no queue itself counts in the queue
// its group was admitted to (the one another member names), not in its
// namespace's default: a Volcano gang whose first pod alone carries the
// queue annotation is counted whole in that queue.
func TestBoundGangCountsInItsGroupsQueue(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	c.upsertNode(gpuNode("n", 8))
	c.upsertQueue(build.Queue("mine").GPUs("", "").Obj())
	c.upsertPodGroup(podGroup("vg", 2))
	for i, q := range []string{"mine", ""} {
		p := newPod("ns", fmt.Sprint("vc-", i)).GPUs(2).Obj()
		p.Annotations = map[string]string{v1alpha1.VolcanoGroupAnnotation: "vg"}
		if q != "" {
			p.Annotations[v1alpha1.VolcanoQueueAnnotation] = q
		}
		p.Spec.NodeName = "n"
		p.Status.Phase = corev1.PodRunning
		c.upsertPod(p)
	}
	in := c.snapshot(newBuilder(v1alpha1.SchedulerName, -1, logr.Discard()), newRefusals(), time.Unix(200, 0))
	n := 0
	for a := range in.snap.AllRunning() {
		n++
		if a.Queue != "mine" {
			t.Errorf("%s counts in queue %q, want mine", a.Pod, a.Queue)
		}
	}
	if n != 2 {
		t.Errorf("%d running allocations, want 2", n)
	}
}

// forgetting records the pods the cache tells the grouping are gone.
type forgetting struct {
	mirrorGrouping
	forgot []string
}

func (g *forgetting) Forget(p *corev1.Pod) { g.forgot = append(g.forgot, podKey(p)) }

// A deleted pod is forgotten by the grouping too, which would otherwise
// keep it waiting for its workload's group after it is gone.
func TestDeletedPodIsForgottenByTheGrouping(t *testing.T) {
	c := newClusterCache("gpuplane-scheduler")
	g := &forgetting{}
	c.grouping = g
	p := newPod("ml", "w-0").GPUs(1).Obj()
	c.upsertPod(p)
	c.deletePod(p)
	if len(g.forgot) != 1 || g.forgot[0] != "ml/w-0" {
		t.Fatalf("the grouping was told %v; want ml/w-0 forgotten", g.forgot)
	}
}
