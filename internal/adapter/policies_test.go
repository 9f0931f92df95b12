package adapter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func TestModelQueueReadsPoliciesOverTime(t *testing.T) {
	q := build.Queue("team").UsageHalfLife(2 * time.Hour).MinRuntime(10 * time.Minute).PreemptionGrace(30).Obj()
	m, err := modelQueue(q)
	if err != nil {
		t.Fatal(err)
	}
	if m.UsageHalfLife != (2*time.Hour).Milliseconds() || m.MinRuntime != (10*time.Minute).Milliseconds() {
		t.Errorf("queue %+v, want the half-life and minimum runtime in milliseconds", m)
	}
	for _, tc := range []struct {
		name  string
		q     *v1alpha1.Queue
		field string
	}{
		{"negative half-life", build.Queue("x").UsageHalfLife(-time.Second).Obj(), "spec.usageHalfLife"},
		{"half-life too long", build.Queue("x").UsageHalfLife(v1alpha1.MaxUsageHalfLife + time.Hour).Obj(), "spec.usageHalfLife"},
		{"minimum runtime too long", build.Queue("x").MinRuntime(8 * 24 * time.Hour).Obj(), "spec.minRuntime"},
		{"negative grace", build.Queue("x").PreemptionGrace(-1).Obj(), "spec.preemptionGracePeriodSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := modelQueue(tc.q); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// lowPod is a pod of priority 1 running on node a with the GPUs given,
// created at created.
func lowPod(name, gpus string, created time.Time) *corev1.Pod {
	low := int32(1)
	p := newPod("ns", name).GPUs(len(strings.Split(gpus, ","))).Obj()
	p.Spec.NodeName, p.Spec.Priority = "a", &low
	p.Annotations = map[string]string{GPUsAnnotation: gpus}
	p.CreationTimestamp = metav1.NewTime(created)
	return p
}

func urgentPod(gpus int) *corev1.Pod {
	high := int32(100)
	p := newPod("ns", "urgent").GPUs(gpus).Obj()
	p.Spec.Priority = &high
	return p
}

// The victim is the one that loses the least work: the older pod that
// checkpointed a moment ago, not the newer one that never did; a value
// that is no time counts as no checkpoint, and says so on the pod.
func TestLoopEvictsTheVictimThatLosesLeast(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ckpt      string
		want      string
		wantEvent bool
	}{
		{"fresh checkpoint", "", "ns/old-saved", false},
		{"no time", "yesterday", "ns/new", true},
		{"in the future", "2099-01-01T00:00:00Z", "ns/new", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 8))
			old := lowPod("old-saved", "0,1,2,3", time.Unix(100, 0))
			ckpt := tc.ckpt
			if ckpt == "" {
				ckpt = f.now.Add(-time.Second).UTC().Format(time.RFC3339)
			}
			old.Annotations[v1alpha1.LastCheckpointAnnotation] = ckpt
			f.cache.upsertPod(old)
			f.cache.upsertPod(lowPod("new", "4,5,6,7", time.Unix(900, 0)))
			f.cache.upsertPod(urgentPod(4))
			f.cycle()
			if !slices.Equal(f.api.evicted, []string{tc.want}) {
				t.Fatalf("evicted %v, want %s", f.api.evicted, tc.want)
			}
			got := slices.ContainsFunc(f.status.events, func(e string) bool { return strings.HasPrefix(e, "InvalidCheckpoint old-saved:") })
			if got != tc.wantEvent {
				t.Errorf("events %v, want an InvalidCheckpoint event on old-saved: %v", f.status.events, tc.wantEvent)
			}
		})
	}
}

// A queue's minimum runtime, and a priority class's, keep a young victim
// running.
func TestLoopMinimumRuntime(t *testing.T) {
	for _, tc := range []struct {
		name       string
		queueMin   time.Duration
		classMin   string
		created    time.Time // fixture's clock: 1001 s at the first cycle
		wantEvict  bool
		wantBadCls bool
		// ofAge is when the victim reaches its minimum, which the
		// waiting pod's condition gives, when it is not evicted.
		ofAge string
	}{
		{"queue minimum not reached", 10 * time.Minute, "", time.Unix(900, 0), false, false, "1970-01-01T00:25:00Z"},
		{"queue minimum reached", time.Minute, "", time.Unix(900, 0), true, false, ""},
		{"class minimum not reached", 0, "5m", time.Unix(900, 0), false, false, "1970-01-01T00:20:00Z"},
		{"class minimum reached", 0, "1m", time.Unix(900, 0), true, false, ""},
		{"class minimum invalid: none", 0, "forever", time.Unix(900, 0), true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 8))
			q := build.Queue("team")
			if tc.queueMin > 0 {
				q.MinRuntime(tc.queueMin)
			}
			f.cache.upsertQueue(q.Obj())
			pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Value: 1}
			if tc.classMin != "" {
				pc.Annotations = map[string]string{v1alpha1.MinRuntimeAnnotation: tc.classMin}
			}
			f.cache.upsertPriorityClass(pc)
			victim := lowPod("victim", "0,1,2,3,4,5,6,7", tc.created)
			victim.Labels[v1alpha1.QueueLabel] = "team"
			victim.Spec.PriorityClassName = "batch"
			f.cache.upsertPod(victim)
			urgent := urgentPod(8)
			urgent.Labels[v1alpha1.QueueLabel] = "team"
			f.cache.upsertPod(urgent)
			f.cycle()
			if got := len(f.api.evicted) == 1; got != tc.wantEvict {
				t.Fatalf("evicted %v, want an eviction: %v", f.api.evicted, tc.wantEvict)
			}
			if tc.ofAge != "" {
				// Unschedulable, as more nodes would start it, in the
				// core's words with the victim's time.
				got := f.status.conditions["ns/urgent"]
				want := "Unschedulable: fits only by evicting pods younger than their minimum runtime: it waits for them to reach it (the first reaches it at " + tc.ofAge + ")"
				if got != want {
					t.Errorf("urgent's condition %q, want %q", got, want)
				}
			}
			bad := slices.ContainsFunc(f.status.events, func(e string) bool { return strings.HasPrefix(e, "InvalidMinRuntime batch:") })
			if bad != tc.wantBadCls {
				t.Errorf("events %v, want InvalidMinRuntime on the class: %v", f.status.events, tc.wantBadCls)
			}
		})
	}
}

// The queues' usage over time goes from each cycle to the next.
func TestLoopCarriesUsageOverTime(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.cache.upsertQueue(build.Queue("team").UsageHalfLife(time.Hour).Obj())
	p := lowPod("run", "0,1,2,3", time.Unix(100, 0))
	p.Labels[v1alpha1.QueueLabel] = "team"
	f.cache.upsertPod(p)
	f.cycle()
	if len(f.loop.usage) != 1 || f.loop.usage[0].Queue != "team" || f.loop.usage[0].GPUMilli != 4000 || f.loop.usage[0].At != f.now.UnixMilli() {
		t.Fatalf("usage %+v, want team's 4 GPUs as of the cycle", f.loop.usage)
	}
	// Half an hour later with nothing running, the past has decayed by
	// 2^-0.5, not started over.
	f.cache.deletePod(p)
	f.now = f.now.Add(30*time.Minute - time.Second)
	f.cycle()
	if got := fmt.Sprintf("%.0f", f.loop.usage[0].GPUMilli); got != "2828" {
		t.Errorf("usage %+v, want 4000*2^-0.5 = 2828 GPU milli", f.loop.usage)
	}
}

// A checkpoint written while the pod runs counts from the next cycle.
func TestLoopReadsACheckpointWrittenLater(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	old := lowPod("old-saved", "0,1,2,3", time.Unix(100, 0))
	f.cache.upsertPod(old)
	f.cache.upsertPod(lowPod("new", "4,5,6,7", time.Unix(900, 0)))
	f.cycle()
	saved := old.DeepCopy()
	saved.Annotations[v1alpha1.LastCheckpointAnnotation] = f.now.UTC().Format(time.RFC3339)
	f.cache.upsertPod(saved)
	f.cache.upsertPod(urgentPod(4))
	f.cycle()
	if !slices.Equal(f.api.evicted, []string{"ns/old-saved"}) {
		t.Fatalf("evicted %v, want ns/old-saved, which has just checkpointed", f.api.evicted)
	}
}

// A gang that would fit only by evicting pods younger than their minimum
// runtime says so on its PodGroup, the reason its own.
func TestLoopGangWaitsForVictimsMinimumRuntime(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	f.cache.upsertQueue(build.Queue("team").MinRuntime(10 * time.Minute).Obj())
	victim := lowPod("victim", "0,1,2,3,4,5,6,7", time.Unix(900, 0))
	victim.Labels[v1alpha1.QueueLabel] = "team"
	f.cache.upsertPod(victim)
	pg := podGroup("train", 2)
	pg.Spec.Queue = "team"
	f.cache.upsertPodGroup(pg)
	high := int32(100)
	for i := range 2 {
		p := newPod("ns", fmt.Sprint("train-", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "train").Label(v1alpha1.QueueLabel, "team").Obj()
		p.Spec.Priority = &high
		f.cache.upsertPod(p)
	}
	f.cycle()
	if len(f.api.evicted) != 0 || len(f.api.binds) != 0 {
		t.Fatalf("evicted %v and bound %v, want nothing while the victim is young", f.api.evicted, f.api.binds)
	}
	st, ok := f.status.statuses["pg/ns/train"].(*v1alpha1.PodGroup)
	if !ok {
		t.Fatal("no PodGroup status written")
	}
	cd := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionSchedulable)
	if cd == nil || cd.Status != "False" || cd.Reason != "VictimsBelowMinRuntime" || !strings.Contains(cd.Message, "1970-01-01T00:25:00Z") {
		t.Errorf("PodGroup condition %+v, want Schedulable=False VictimsBelowMinRuntime with the victim's time", cd)
	}
	if got := f.status.conditions["ns/train-0"]; !strings.HasPrefix(got, "Unschedulable: fits only by evicting pods younger") {
		t.Errorf("pod condition %q, want Unschedulable in the core's words", got)
	}
}
