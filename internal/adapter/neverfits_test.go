package adapter

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// A gang that can never start as it is (its minMember pods above its
// queue's limit, or above every node together) gives its PodGroup a
// Schedulable=False condition whose reason says so, and its pods a
// condition and event whose message names spec.minMember, where a derived
// minMember came from, and the limit. Its pods' reason is the PodGroup's,
// but for a gang above every node together: more nodes would start it, so
// its pods are Unschedulable, as autoscalers read it.
func TestLoopSaysWhenAGangCanNeverStart(t *testing.T) {
	derived := "Job.batch ns/train: minMember 4 from builtin/batch-job spec.minMember"
	tests := []struct {
		name       string
		queueLimit string
		gpus       int // per pod
		wantReason string
		// wantPod is the pods' reason, when not wantReason.
		wantPod string
		want    []string
	}{
		{name: "above the queue's limit", queueLimit: "3", gpus: 1, wantReason: "ExceedsQueueLimit",
			want: []string{"PodGroup ns/train (derived from " + derived + "): spec.minMember 4", `above queue "capped"'s limit {nvidia.com/gpu=3}`, "nvidia.com/gpu=4"}},
		{name: "above every node together", gpus: 8, wantReason: "ExceedsClusterCapacity", wantPod: "Unschedulable",
			want: []string{"spec.minMember 4 needs at least", "nvidia.com/gpu=32", "more than all the cluster's nodes have together", "nvidia.com/gpu=16"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 8), gpuNode("b", 8))
			q := "default"
			if tc.queueLimit != "" {
				q = "capped"
				f.cache.upsertQueue(build.Queue(q).GPUs("", tc.queueLimit).Obj())
			}
			pg := podGroup("train", 4)
			pg.Spec.Queue = q
			pg.Annotations = map[string]string{v1alpha1.DerivedFromAnnotation: derived}
			f.cache.upsertPodGroup(pg)
			for i := range 4 {
				f.cache.upsertPod(newPod("ns", fmt.Sprint("train-", i)).GPUs(tc.gpus).Label(v1alpha1.PodGroupLabel, "train").Obj())
			}
			f.cycle()
			if len(f.api.binds) != 0 {
				t.Fatalf("bound %v, want nothing", f.api.binds)
			}
			got := f.status.conditions["ns/train-0"]
			if want := cmp.Or(tc.wantPod, tc.wantReason); !strings.HasPrefix(got, want+": ") {
				t.Errorf("pod condition %q, want reason %s", got, want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("pod condition %q lacks %q", got, w)
				}
			}
			st, ok := f.status.statuses["pg/ns/train"].(*v1alpha1.PodGroup)
			if !ok {
				t.Fatal("no PodGroup status written")
			}
			cd := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionSchedulable)
			if cd == nil || cd.Status != "False" || cd.Reason != tc.wantReason || !strings.Contains(cd.Message, "spec.minMember 4") {
				t.Errorf("PodGroup condition %+v, want Schedulable=False %s naming spec.minMember", cd, tc.wantReason)
			}
		})
	}
}

// A pod alone that asks for more than its queue's limit says so too.
func TestLoopSaysWhenAPodCanNeverStartInItsQueue(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.cache.upsertQueue(build.Queue("capped").GPUs("", "2").Obj())
	p := newPod("ns", "big").GPUs(4).Label(v1alpha1.QueueLabel, "capped").Obj()
	f.cache.upsertPod(p)
	f.cycle()
	got := f.status.conditions["ns/big"]
	if !strings.HasPrefix(got, "ExceedsQueueLimit: the pod asks for") || !strings.Contains(got, `above queue "capped"'s limit {nvidia.com/gpu=2}`) {
		t.Errorf("pod condition %q, want ExceedsQueueLimit naming the queue's limit", got)
	}
}

// With a node autoscaler, a gang above every node together waits for room
// (Unschedulable, which the autoscaler buys nodes for) instead of being
// told it can never start.
func TestLoopWithNodeAutoscalerCallsABigGangUnschedulable(t *testing.T) {
	f := newLoopFixture(t, Config{NodeAutoscaler: true}, gpuNode("a", 8), gpuNode("b", 8))
	f.cache.upsertPodGroup(podGroup("train", 4))
	for i := range 4 {
		f.cache.upsertPod(newPod("ns", fmt.Sprint("train-", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "train").Obj())
	}
	f.cycle()
	if len(f.api.binds) != 0 {
		t.Fatalf("bound %v, want nothing", f.api.binds)
	}
	if got := f.status.conditions["ns/train-0"]; !strings.HasPrefix(got, "Unschedulable: ") {
		t.Errorf("pod condition %q, want reason Unschedulable", got)
	}
}
