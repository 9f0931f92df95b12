package adapter

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// A Live view kept object by object, with objects coming, changing and
// going between views, gives the snapshot ViewOf gives for the objects
// left: the builder's memos follow the changes.
func TestLiveFollowsChanges(t *testing.T) {
	now := time.Unix(100, 0)
	nodeA := build.Node("a").CPU("8").Memory("16Gi").Pods(110).GPUs(4).Obj()
	nodeB := build.Node("b").CPU("8").Memory("16Gi").Pods(110).GPUs(8).Obj()
	run := build.Pod("ns", "running").NodeName("a").Request(corev1.ResourceCPU, "2").GPUs(2).Obj()
	moved := build.Pod("ns", "running").NodeName("b").Request(corev1.ResourceCPU, "2").GPUs(2).Obj()
	waits := build.Pod("ns", "waits").SchedulerName(v1alpha1.SchedulerName).Request(corev1.ResourceCPU, "1").GPUs(1).Obj()
	q := build.Queue("q").GPUs("2", "").Obj()

	l := NewLive(v1alpha1.SchedulerName)
	for _, o := range []runtime.Object{nodeA.DeepCopy(), run.DeepCopy(), waits.DeepCopy()} {
		if err := l.Upsert(o); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.View(now) // the builder's memos now hold this state
	steps := []struct {
		upsert, del []runtime.Object
	}{
		{upsert: []runtime.Object{nodeB.DeepCopy(), q.DeepCopy()}},
		{upsert: []runtime.Object{moved.DeepCopy()}},
		{del: []runtime.Object{nodeA.DeepCopy(), waits.DeepCopy()}},
	}
	state := []runtime.Object{nodeA, run, waits}
	for i, st := range steps {
		for _, o := range st.upsert {
			if err := l.Upsert(o); err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range st.del {
			if err := l.Delete(o); err != nil {
				t.Fatal(err)
			}
		}
		switch i {
		case 0:
			state = []runtime.Object{nodeA, nodeB, run, waits, q}
		case 1:
			state = []runtime.Object{nodeA, nodeB, moved, waits, q}
		case 2:
			state = []runtime.Object{nodeB, moved, q}
		}
		got := l.View(now)
		want, err := ViewOf(v1alpha1.SchedulerName, state, now)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(got.Snapshot)
		w, _ := json.Marshal(want.Snapshot)
		if string(g) != string(w) {
			t.Errorf("step %d: live view\n%s\nwant ViewOf's\n%s", i, g, w)
		}
	}
	if err := l.Upsert(&corev1.ConfigMap{}); err == nil {
		t.Error("Upsert of a ConfigMap succeeded, want an error naming the kind")
	}
}
