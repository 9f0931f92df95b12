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
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
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

// A scheduler that starts again keeps the queues' usage over time: the
// loop writes it in each Queue's status and a new loop reads it back, so
// of two queues holding as much now, the one that used less lately comes
// first after the restart as before it. A loop that forgot it would see
// them alike and take the first.
func TestLoopUsageOverTimeSurvivesARestart(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("n", 8))
	for _, q := range []string{"a", "b"} {
		f.cache.upsertQueue(build.Queue(q).UsageHalfLife(time.Hour).Obj())
	}
	ran := lowPod("ran", "0,1,2,3,4,5,6,7", time.Unix(100, 0))
	ran.Spec.NodeName = "n"
	ran.Labels[v1alpha1.QueueLabel] = "a"
	f.cache.upsertPod(ran)
	f.cycle()
	written := map[string]*v1alpha1.Queue{}
	for _, q := range []string{"a", "b"} {
		obj, ok := f.status.statuses["queue/"+q].(*v1alpha1.Queue)
		if !ok || obj.Status.UsageOverTime == nil {
			t.Fatalf("queue %s: status %+v, want its usage over time", q, f.status.statuses["queue/"+q])
		}
		written[q] = obj
	}
	if got := written["a"].Status.UsageOverTime.Usage[ResourceGPU]; got.MilliValue() != 8000 {
		t.Fatalf("a's usage over time %s GPUs, want 8", got.String())
	}

	// Ten minutes on, a's pod has finished; each queue runs 4 GPUs on n
	// now and has a pod of 4 GPUs waiting for m, which holds one.
	start := func(withStatus bool) *loopFixture {
		g := newLoopFixture(t, Config{}, gpuNode("n", 8), gpuNode("m", 4))
		g.now = f.now.Add(10 * time.Minute)
		for i, q := range []string{"a", "b"} {
			obj := written[q].DeepCopy()
			if !withStatus {
				obj.Status = v1alpha1.QueueStatus{}
			}
			g.cache.upsertQueue(obj)
			run := lowPod("runs-"+q, []string{"0,1,2,3", "4,5,6,7"}[i], time.Unix(1500, 0))
			run.Spec.NodeName = "n"
			run.Labels[v1alpha1.QueueLabel] = q
			g.cache.upsertPod(run)
			g.cache.upsertPod(newPod("ns", "wants-"+q).GPUs(4).Label(v1alpha1.QueueLabel, q).Obj())
		}
		g.cycle()
		return g
	}
	if got := start(true).api.binds; len(got) != 1 || !strings.Contains(got[0], "wants-b") {
		t.Errorf("after a restart: bound %v, want ns/wants-b (queue b used less lately)", got)
	}
	if got := start(false).api.binds; len(got) != 1 || !strings.Contains(got[0], "wants-a") {
		t.Errorf("with the history forgotten: bound %v, want ns/wants-a (the queues alike, the first)", got)
	}
}

// A Queue's status.usageOverTime is read from the cluster: what is not a
// usage over time is left out with an error naming the field, and an
// amount above the nodes' together counts as that.
func TestUsageFromStatusChecksIt(t *testing.T) {
	now := time.Unix(5000, 0)
	nodes := []model.Node{{Name: "n", MilliCPU: 64000, MemoryMiB: 1 << 18, GPUs: make([]model.GPU, 8)}}
	for i := range nodes[0].GPUs {
		nodes[0].GPUs[i] = model.GPU{Index: i}
	}
	queue := func(name string, at time.Time, usage ...string) *v1alpha1.Queue {
		q := build.Queue(name).Obj()
		q.Status.UsageOverTime = &v1alpha1.QueueUsageOverTime{Usage: rl(usage...), At: metav1.NewTime(at)}
		return q
	}
	got, errs := usageFromStatus(map[string]*v1alpha1.Queue{
		"ok":       queue("ok", time.Unix(4000, 0), "nvidia.com/gpu", "2500m", "cpu", "3"),
		"huge":     queue("huge", time.Unix(4000, 0), "nvidia.com/gpu", "1M"),
		"future":   queue("future", time.Unix(6000, 0), "nvidia.com/gpu", "1"),
		"unset":    queue("unset", time.Time{}, "nvidia.com/gpu", "1"),
		"negative": queue("negative", time.Unix(4000, 0), "nvidia.com/gpu", "-1"),
		"other":    queue("other", time.Unix(4000, 0), "example.com/fpga", "1"),
	}, nodes, now)
	want := []model.QueueUsage{{Queue: "huge", GPUMilli: 8000, At: 4000000}, {Queue: "ok", MilliCPU: 3000, GPUMilli: 2500, At: 4000000}}
	if !slices.Equal(got, want) {
		t.Errorf("usage %+v, want %+v", got, want)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	for _, w := range []string{`queue "future": status.usageOverTime.at`, `queue "unset": status.usageOverTime.at is not set`,
		`queue "negative": status.usageOverTime.usage[nvidia.com/gpu] is negative`, `queue "other": status.usageOverTime.usage names example.com/fpga`} {
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, w) }) {
			t.Errorf("errors %q, want one starting %q", msgs, w)
		}
	}
}

// A queue's status.usageOverTime is written again only once it is a
// minute old, so a queue's status is not rewritten every cycle as time
// moves; and never from a time before the one it has.
func TestKeptUsageIsWrittenAboutOnceAMinute(t *testing.T) {
	q := build.Queue("a").Obj()
	at := time.Unix(1000, 0)
	q.Status.UsageOverTime = usageStatus(&model.QueueUsage{Queue: "a", GPUMilli: 4000, At: at.UnixMilli()})
	for _, tc := range []struct {
		name  string
		at    time.Time
		write bool
	}{
		{"seconds later", at.Add(59 * time.Second), false},
		{"a minute later", at.Add(time.Minute), true},
		{"from before it", at.Add(-time.Hour), true},
	} {
		got := keptUsage(q, &model.QueueUsage{Queue: "a", GPUMilli: 1000, At: tc.at.UnixMilli()})
		if written := got != q.Status.UsageOverTime; written != tc.write {
			t.Errorf("%s: kept %+v, want written again: %v", tc.name, got, tc.write)
		}
	}
	if keptUsage(q, nil) != nil {
		t.Error("a queue without usage over time keeps one in its status")
	}
}
