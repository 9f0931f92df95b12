package adapter

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func TestGroupMovable(t *testing.T) {
	ann := func(v string) map[string]string {
		if v == "" {
			return nil
		}
		return map[string]string{v1alpha1.MovableAnnotation: v}
	}
	pod := func(name, v string) *podInfo {
		return &podInfo{key: "ns/" + name, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann(v)}}}
	}
	pg := func(v string) *v1alpha1.PodGroup {
		return &v1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", Annotations: ann(v)}}
	}
	tests := []struct {
		name    string
		pg      *v1alpha1.PodGroup
		pods    []*podInfo
		queue   string
		want    bool
		wantErr string
	}{
		{"nothing says so", pg(""), []*podInfo{pod("a", "")}, "q", false, ""},
		{"the PodGroup opts in", pg("true"), []*podInfo{pod("a", "")}, "q", true, ""},
		{"the PodGroup overrides its pods", pg("false"), []*podInfo{pod("a", "true")}, "movable", false, ""},
		{"a member opts in", nil, []*podInfo{pod("a", ""), pod("b", "true")}, "q", true, ""},
		{"a member keeps the group in place", nil, []*podInfo{pod("a", "false"), pod("b", "true")}, "movable", false, ""},
		{"the queue opts in", pg(""), []*podInfo{pod("a", "")}, "movable", true, ""},
		{"a workload opts out of its queue", pg(""), []*podInfo{pod("a", "false")}, "movable", false, ""},
		{"a bad PodGroup value", pg("maybe"), []*podInfo{pod("a", "")}, "q", false, "PodGroup ns/g: metadata.annotations[scheduling.gpuplane.io/movable]"},
		{"a bad pod value", nil, []*podInfo{pod("a", "1")}, "q", false, "pod ns/a: metadata.annotations[scheduling.gpuplane.io/movable]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &builder{movableQueues: map[string]bool{}}
			if err := b.queueMovable(&v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "movable", Annotations: ann("true")}}); err != nil {
				t.Fatal(err)
			}
			members := map[string]*podInfo{}
			for _, pi := range tc.pods {
				members[pi.key] = pi
			}
			got, bad := b.groupMovable(tc.pg, members, tc.queue)
			if tc.wantErr != "" {
				if bad == nil || !strings.Contains(bad.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", bad, tc.wantErr)
				}
				return
			}
			if bad != nil || got != tc.want {
				t.Fatalf("= %v, %v; want %v", got, bad, tc.want)
			}
		})
	}
	b := &builder{movableQueues: map[string]bool{}}
	if err := b.queueMovable(&v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q", Annotations: ann("sometimes")}}); err == nil || !strings.Contains(err.Error(), v1alpha1.MovableAnnotation) {
		t.Fatalf("a Queue's bad value: %v, want an error naming the annotation", err)
	}
}

// The moves of the last hour count against the budget; older ones leave.
func TestMoveLog(t *testing.T) {
	l := moveLog{perWindow: 2}
	hour := moveWindow.Milliseconds()
	l.record([]model.Move{{Group: "a", At: 0}}, 0)
	if p := l.policy(); p.Left(hour-1) != 1 || p.Left(hour) != 2 {
		t.Fatalf("left %d within the hour and %d after, want 1 and 2", p.Left(hour-1), p.Left(hour))
	}
	l.record([]model.Move{{Group: "b", At: hour}}, hour)
	if len(l.recent) != 1 || l.recent[0].Group != "b" {
		t.Fatalf("recent %+v, want only b's move", l.recent)
	}
}

// The drain delay and the bound on lost work reach the core's policy in
// the snapshot's unit (milliseconds), and a negative one is refused by
// name.
func TestMoveLogCarriesDrainAfter(t *testing.T) {
	l := moveLog{perWindow: 2, drainAfter: 90 * time.Minute, maxLostWork: 10 * time.Minute}
	if p := l.policy(); p.DrainAfter != (90*time.Minute).Milliseconds() || p.MaxMoves != 2 || p.MaxLostWork != 600000 {
		t.Fatalf("policy %+v, want drainAfter 5400000, maxLostWork 600000 and 2 moves", p)
	}
	for _, tc := range []struct {
		flag string
		set  func(*Config)
	}{
		{"defrag-drain-after", func(c *Config) { c.DefragDrainAfter = -time.Second }},
		{"defrag-max-lost-work", func(c *Config) { c.DefragMaxLostWork = -time.Second }},
	} {
		c := Config{}.Defaults()
		c.RESTConfig = &rest.Config{Host: "https://127.0.0.1:1"}
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Fatalf("got %v, want an error naming %s", err, tc.flag)
		}
	}
}

// A gang that waited --defrag-drain-after for a whole node is told which
// node is kept free for it and what stands there, in its pods'
// PodScheduled message and its PodGroup's Schedulable condition, in the
// cycle that explains it node by node and in the next, which does not.
func TestDrainedGangNamesTheNodeKeptForIt(t *testing.T) {
	f := newLoopFixture(t, Config{DefragMovesPerHour: 4, DefragDrainAfter: time.Minute}, gpuNode("a", 8), gpuNode("b", 8), gpuNode("c", 8))
	running := func(name, node string, gpus int, movable bool) {
		b := newPod("ns", name).GPUs(gpus).NodeName(node).Phase(corev1.PodRunning)
		if movable {
			b.Annotation(v1alpha1.MovableAnnotation, "true")
		}
		f.cache.upsertPod(b.Obj())
	}
	running("u0", "a", 2, false)
	running("m0", "a", 3, true)
	running("u1", "b", 4, false)
	running("u2", "c", 4, false)
	f.cache.upsertPodGroup(podGroup("big", 1))
	f.cache.upsertPod(newPod("ns", "big-0").GPUs(8).Label(v1alpha1.PodGroupLabel, "big").Obj())
	const kept = "node a is kept free for it: it waits for the pods there that may not move (2 GPUs) to end, then the movable ones (3 GPUs) are moved off"
	const want = "Unschedulable: 0/3 nodes available: 2 insufficient nvidia.com/gpu, 1 node kept free for a group waiting for a whole node; " + kept
	// The first cycle explains big node by node; the second reuses that.
	for range 2 {
		f.cycle()
		if got := f.status.conditions["ns/big-0"]; got != want {
			t.Fatalf("big-0 says %q, want %q", got, want)
		}
		pg, ok := f.status.statuses["pg/ns/big"].(*v1alpha1.PodGroup)
		if !ok {
			t.Fatalf("no PodGroup status written: %v", f.status.statuses)
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, v1alpha1.ConditionSchedulable)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Message != strings.TrimPrefix(want, "Unschedulable: ") {
			t.Fatalf("Schedulable condition %+v, want False saying %q", cond, kept)
		}
	}
	if len(f.api.binds) != 0 || len(f.api.evicted) != 0 {
		t.Fatalf("bound %v, evicted %v; want nothing while u0 runs", f.api.binds, f.api.evicted)
	}
}
