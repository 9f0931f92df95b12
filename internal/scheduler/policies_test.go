package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// runningGroup is a one-pod group holding gpus whole GPUs on node, started
// at started, last checkpointed at ckpt (0: never).
func runningGroup(name, queue, node string, prio int32, gpus int, started, ckpt, minRuntime int64) model.Allocation {
	shares := make([]model.GPUShare, gpus)
	return model.Allocation{Pod: name + "-0", Group: name, Queue: queue, Priority: prio, Node: node,
		Request: schedtest.GPU(gpus, 1000), GPUs: shares, StartedAt: started, LastCheckpoint: ckpt, MinRuntime: minRuntime}
}

// withIndexes gives each allocation's shares distinct GPU indexes on its
// node, in order, whole GPUs.
func withIndexes(allocs ...model.Allocation) []model.Allocation {
	next := map[string]int{}
	for i := range allocs {
		for k := range allocs[i].GPUs {
			allocs[i].GPUs[k] = model.GPUShare{Index: next[allocs[i].Node], Milli: model.MilliPerGPU}
			next[allocs[i].Node]++
		}
	}
	return allocs
}

func evictedGroups(d model.Decisions) []string {
	var out []string
	for _, e := range d.Evictions {
		out = append(out, e.Group)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestMinimumRuntime(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(8, "A100").Obj()}
	tests := []struct {
		name    string
		queues  []model.Queue
		running model.Allocation
		pending model.PodGroup
		now     int64
		want    []string
		// code is the pending group's Unplaced code when nothing is
		// evicted, ofAge its OfAge.
		code  string
		ofAge int64
	}{
		{"queue minimum not reached: no preemption",
			[]model.Queue{{Name: "q", MinRuntime: 50}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 0), schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(),
			149, nil, model.UnplacedVictimsTooYoung, 150},
		{"queue minimum reached: preempted",
			[]model.Queue{{Name: "q", MinRuntime: 50}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 0), schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(),
			150, []string{"low"}, "", 0},
		{"priority class minimum not reached",
			[]model.Queue{{Name: "q"}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 200), schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(),
			250, nil, model.UnplacedVictimsTooYoung, 300},
		{"the larger of the class's and the queue's applies",
			[]model.Queue{{Name: "q", MinRuntime: 500}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 200), schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(),
			350, nil, model.UnplacedVictimsTooYoung, 600},
		{"a parent's minimum applies below it",
			[]model.Queue{{Name: "org", MinRuntime: 500}, {Name: "q", Parent: "org"}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 0), schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(),
			350, nil, model.UnplacedVictimsTooYoung, 600},
		{"no reclaim of a young borrower",
			[]model.Queue{{Name: "org"}, {Name: "a", Parent: "org", MinRuntime: 100}, {Name: "b", Parent: "org", Guaranteed: model.Resources{GPUMilli: 8000}}},
			runningGroup("borrower", "a", "n", 0, 8, 100, 0, 0), schedtest.Group("owner").Queue("b").Pods(1, schedtest.GPU(4, 1000)).Obj(),
			150, nil, model.UnplacedVictimsTooYoung, 200},
		{"reclaim of a borrower past its minimum",
			[]model.Queue{{Name: "org"}, {Name: "a", Parent: "org", MinRuntime: 100}, {Name: "b", Parent: "org", Guaranteed: model.Resources{GPUMilli: 8000}}},
			runningGroup("borrower", "a", "n", 0, 8, 100, 0, 0), schedtest.Group("owner").Queue("b").Pods(1, schedtest.GPU(4, 1000)).Obj(),
			200, []string{"borrower"}, "", 0},
		// The minimum is what keeps these waiting only where the eviction
		// was allowed at all.
		{"a queue that forbids preemption does not wait for the minimum",
			[]model.Queue{{Name: "q", MinRuntime: 50, NoPreemption: true}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 0), schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(),
			149, nil, model.UnplacedNoFit, 0},
		{"a group that could not evict it anyway does not fit",
			[]model.Queue{{Name: "q", MinRuntime: 50}},
			runningGroup("low", "q", "n", 0, 8, 100, 0, 0), schedtest.Group("same").Queue("q").Pods(1, schedtest.GPU(8, 1000)).Obj(),
			149, nil, model.UnplacedNoFit, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, Queues: tc.queues, Now: tc.now, Budget: model.DisruptionBudget{MaxEvictions: -1},
				RunningByNode: schedtest.OnNodes(nodes, withIndexes(tc.running)...), Pending: []model.PodGroup{tc.pending}}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			if got := evictedGroups(d); !slices.Equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
			if tc.code == "" {
				return
			}
			if len(d.Unplaced) != 1 || d.Unplaced[0].Group != tc.pending.Name {
				t.Fatalf("unplaced %+v, want %s", d.Unplaced, tc.pending.Name)
			}
			if u := d.Unplaced[0]; u.Code != tc.code || u.OfAge != tc.ofAge || u.Wait != model.WaitCapacity {
				t.Errorf("unplaced %+v, want code %s of age at %d, waiting for capacity", u, tc.code, tc.ofAge)
			}
		})
	}
}

// A group placed in a cycle starts then: the minimum runtime counts from
// the bind, in the core's own books as in model.Apply's.
func TestMinimumRuntimeCountsFromTheBind(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(8, "A100").Obj()}
	snap := model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "q"}}, Now: 1000, Budget: model.DisruptionBudget{MaxEvictions: -1},
		Pending: []model.PodGroup{func() model.PodGroup {
			g := schedtest.Group("low").Queue("q").Pods(1, schedtest.GPU(8, 1000)).Obj()
			g.MinRuntime = 60
			return g
		}()}}
	h, err := schedtest.NewHarness(snap, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := h.Cycle(); err != nil || len(d.Binds) != 1 {
		t.Fatalf("binds %+v, err %v; want low bound", d.Binds, err)
	}
	// The harness starts pods at its own clock; restart them at Now.
	run := schedtest.Running(&h.Snap)
	if len(run) != 1 || run[0].MinRuntime != 60 {
		t.Fatalf("running %+v, want low carrying its minimum runtime", run)
	}
	run[0].StartedAt = 1000
	h.Snap.RunningByNode = schedtest.OnNodes(nodes, run...)
	h.Snap.Pending = append(h.Snap.Pending, schedtest.Group("high").Queue("q").Priority(9).Pods(1, schedtest.GPU(8, 1000)).Obj())
	for now, want := range map[int64]int{1059: 0, 1060: 1} {
		h.Snap.Now = now
		d, err := h.Sched.Cycle(&h.Snap)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Evictions) != want {
			t.Errorf("at %d: evictions %+v, want %d", now, d.Evictions, want)
		}
	}
}

func TestCheckpointAwareVictims(t *testing.T) {
	two := []model.Node{schedtest.Node("a", 64000, 1<<20).GPUs(4, "A100").Obj(), schedtest.Node("b", 64000, 1<<20).GPUs(4, "A100").Obj()}
	one := two[:1]
	// keep holds the rest of node b at a priority the preemptor cannot
	// evict.
	keep := runningGroup("keep", "q", "b", 9, 2, 0, 0, 0)
	tests := []struct {
		name    string
		nodes   []model.Node
		running []model.Allocation
		gpus    int
		byAge   bool
		want    []string
	}{
		// Same GPUs: the older group checkpointed a moment ago loses
		// less than the newer one that never did.
		{"a fresh checkpoint beats a later start", one,
			[]model.Allocation{runningGroup("old-saved", "q", "a", 0, 2, 0, 990, 0), runningGroup("new-unsaved", "q", "a", 0, 2, 900, 0, 0)},
			2, false, []string{"old-saved"}},
		{"blind to checkpoints: the newest goes", one,
			[]model.Allocation{runningGroup("old-saved", "q", "a", 0, 2, 0, 990, 0), runningGroup("new-unsaved", "q", "a", 0, 2, 900, 0, 0)},
			2, true, []string{"new-unsaved"}},
		// GPUs count: 4 GPUs for 100 lose more than 2 GPUs for 150.
		{"GPUs times time", two,
			[]model.Allocation{runningGroup("wide", "q", "a", 0, 4, 900, 0, 0), runningGroup("narrow", "q", "b", 0, 2, 850, 0, 0), keep},
			2, false, []string{"narrow"}},
		{"GPUs times time, blind", two,
			[]model.Allocation{runningGroup("wide", "q", "a", 0, 4, 900, 0, 0), runningGroup("narrow", "q", "b", 0, 2, 850, 0, 0), keep},
			2, true, []string{"wide"}},
		// A checkpoint older than the start (the job resumed from it)
		// counts from the start.
		{"a checkpoint before the start counts from the start", one,
			[]model.Allocation{runningGroup("resumed", "q", "a", 0, 2, 800, 10, 0), runningGroup("fresh", "q", "a", 0, 2, 700, 0, 0)},
			2, false, []string{"resumed"}},
		// Priority still comes first.
		{"lower priority before less work lost", one,
			[]model.Allocation{runningGroup("saved", "q", "a", 1, 2, 0, 999, 0), runningGroup("lowest", "q", "a", 0, 2, 0, 0, 0)},
			2, false, []string{"lowest"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: tc.nodes, Queues: []model.Queue{{Name: "q"}}, Now: 1000, VictimsByAge: tc.byAge,
				Budget: model.DisruptionBudget{MaxEvictions: -1}, RunningByNode: schedtest.OnNodes(tc.nodes, withIndexes(tc.running...)...),
				Pending: []model.PodGroup{schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(tc.gpus, 1000)).Obj()}}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			if got := evictedGroups(d); !slices.Equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
		})
	}
}

// The work a victim loses grows with time, so the order among victims
// changes between cycles with nothing else changed: the core's books
// follow the snapshot's Now, not the order they sorted victims in before.
func TestVictimOrderFollowsTime(t *testing.T) {
	nodes := []model.Node{schedtest.Node("a", 64000, 1<<20).GPUs(4, "A100").Obj(), schedtest.Node("b", 64000, 1<<20).GPUs(4, "A100").Obj()}
	// wide: 4 GPUs since 900; narrow: 2 GPUs since 700. At 1000 wide
	// loses 400, narrow 600; at 2000 wide 4400, narrow 2600.
	running := withIndexes(runningGroup("wide", "q", "a", 0, 4, 900, 0, 0), runningGroup("narrow", "q", "b", 0, 2, 700, 0, 0),
		runningGroup("keep", "q", "b", 9, 2, 0, 0, 0))
	byNode := schedtest.OnNodes(nodes, running...)
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// At 1000 a group that never evicts looks at the victims (to say
	// whether evicting would place it) and evicts none.
	probe := schedtest.Group("probe").Queue("q").Priority(5).Pods(1, schedtest.GPU(2, 1000)).Obj()
	probe.NeverEvicts = true
	snap := model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "q"}}, Now: 1000, Budget: model.DisruptionBudget{MaxEvictions: -1},
		RunningByNode: byNode, Pending: []model.PodGroup{probe}}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Evictions) != 0 || len(d.Unplaced) != 1 || d.Unplaced[0].Code != model.UnplacedPreemptionDisabled {
		t.Fatalf("evictions %+v, unplaced %+v; want none, and the probe told it would fit by preempting", d.Evictions, d.Unplaced)
	}
	// At 2000, the same running pods (the same chunks): narrow now loses
	// less.
	snap.Now, snap.Pending = 2000, []model.PodGroup{schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(2, 1000)).Obj()}
	d, err = s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if got := evictedGroups(d); !slices.Equal(got, []string{"narrow"}) {
		t.Fatalf("at 2000: evicted %v, want narrow", got)
	}
}

// A queue that used nothing lately comes first: with the same weights and
// the same usage now, the past tips fair shares, and so reclaim. (Tilts
// 2 and 1/2 would give 6.4 and 1.6 GPUs; each queue wants 6.)
func TestUsageOverTimeDrivesReclaim(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(8, "A100").Obj()}
	queues := []model.Queue{{Name: "org"}, {Name: "a", Parent: "org", UsageHalfLife: 3600}, {Name: "b", Parent: "org", UsageHalfLife: 3600}}
	// a and b hold 4 GPUs each; b wants 2 more, a 2 more too.
	running := withIndexes(runningGroup("a1", "a", "n", 0, 2, 0, 0, 0), runningGroup("a2", "a", "n", 0, 2, 10, 0, 0),
		runningGroup("b1", "b", "n", 0, 2, 0, 0, 0), runningGroup("b2", "b", "n", 0, 2, 10, 0, 0))
	pending := []model.PodGroup{schedtest.Group("a3").Queue("a").Created(20).Pods(1, schedtest.GPU(2, 1000)).Obj(),
		schedtest.Group("b3").Queue("b").Created(20).Pods(1, schedtest.GPU(2, 1000)).Obj()}
	tests := []struct {
		name      string
		usage     []model.QueueUsage
		wantEvict []string
		wantFairB int64
	}{
		{"no past: even shares, nobody reclaims", nil, nil, 4000},
		{"a used all GPUs lately, b none: b reclaims from a",
			[]model.QueueUsage{{Queue: "a", GPUMilli: 8000, At: 1000}, {Queue: "b", At: 1000}}, []string{"a2"}, 6000},
		{"b used all lately: a reclaims from b",
			[]model.QueueUsage{{Queue: "a", At: 1000}, {Queue: "b", GPUMilli: 8000, At: 1000}}, []string{"b2"}, 2000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, Queues: queues, Now: 1000, Usage: tc.usage, Budget: model.DisruptionBudget{MaxEvictions: -1},
				RunningByNode: schedtest.OnNodes(nodes, running...), Pending: pending}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			if got := evictedGroups(d); !slices.Equal(got, tc.wantEvict) {
				t.Fatalf("evicted %v, want %v", got, tc.wantEvict)
			}
			var fairB int64 = -1
			for _, q := range d.Queues {
				if q.Name == "b" {
					fairB = q.FairShare.GPUMilli
				}
			}
			if fairB < tc.wantFairB-1 || fairB > tc.wantFairB+1 {
				t.Errorf("b's fair share %d, want %d", fairB, tc.wantFairB)
			}
			// The usage over time goes back out for the next snapshot,
			// as of Now, for the queues with a half-life only.
			if len(d.Usage) != 2 || d.Usage[0].At != 1000 || d.Usage[1].At != 1000 {
				t.Errorf("usage out %+v, want a and b as of 1000", d.Usage)
			}
		})
	}
}

// Between queues that run nothing now, the past decides who goes first:
// the one that used the cluster lately waits for the one that did not.
// Without a past the first queue goes first.
func TestUsageOverTimeOrdersIdleQueues(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(8, "A100").Obj()}
	queues := []model.Queue{{Name: "a", UsageHalfLife: 3600}, {Name: "b", UsageHalfLife: 3600}}
	pending := []model.PodGroup{schedtest.Group("a1").Queue("a").Created(10).Pods(1, schedtest.GPU(8, 1000)).Obj(),
		schedtest.Group("b1").Queue("b").Created(20).Pods(1, schedtest.GPU(8, 1000)).Obj()}
	for _, tc := range []struct {
		name  string
		usage []model.QueueUsage
		want  string
	}{
		{"no past", nil, "a1"},
		{"a used the node lately", []model.QueueUsage{{Queue: "a", GPUMilli: 8000, At: 900}, {Queue: "b", At: 900}}, "b1"},
		{"b used the node lately", []model.QueueUsage{{Queue: "a", At: 900}, {Queue: "b", GPUMilli: 8000, At: 900}}, "a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := runCycle(t, model.Snapshot{Nodes: nodes, Queues: queues, Now: 1000, Usage: tc.usage, Pending: pending})
			if len(d.Binds) != 1 || d.Binds[0].Group != tc.want {
				t.Fatalf("binds %+v, want %s alone", d.Binds, tc.want)
			}
		})
	}
}

// The usage over time comes back from each cycle and, passed back at the
// same Now, changes nothing; passed back later it moves toward the usage
// now.
func TestUsageOverTimeRoundTrip(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(8, "A100").Obj()}
	snap := model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "a", UsageHalfLife: 100}}, Now: 1000,
		RunningByNode: schedtest.OnNodes(nodes, withIndexes(runningGroup("a1", "a", "n", 0, 4, 0, 0, 0))...),
		Usage:         []model.QueueUsage{{Queue: "a", GPUMilli: 0, At: 900}}}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{2000, 2000, 3000} {
		d, err := s.Cycle(&snap)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Usage) != 1 || fmt.Sprintf("%.3f", d.Usage[0].GPUMilli) != fmt.Sprintf("%.3f", want) {
			t.Fatalf("cycle %d: usage %+v, want %g GPU milli", i, d.Usage, want)
		}
		snap.Usage = d.Usage
		if i == 1 {
			snap.Now += 100
		}
	}
}

// A checkpoint reported while a pod runs reaches the core's books: the
// driver gives the node a new chunk with the allocation changed, and the
// next cycle chooses victims by it.
func TestCheckpointReportedLaterCounts(t *testing.T) {
	nodes := []model.Node{schedtest.Node("a", 64000, 1<<20).GPUs(4, "A100").Obj()}
	running := withIndexes(runningGroup("old", "q", "a", 0, 2, 0, 0, 0), runningGroup("new", "q", "a", 0, 2, 900, 0, 0))
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	snap := model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "q"}}, Now: 1000, Budget: model.DisruptionBudget{MaxEvictions: -1},
		RunningByNode: schedtest.OnNodes(nodes, running...)}
	if _, err := s.Cycle(&snap); err != nil {
		t.Fatal(err)
	}
	running[0].LastCheckpoint = 995
	snap.RunningByNode = schedtest.OnNodes(nodes, running...)
	snap.Pending = []model.PodGroup{schedtest.Group("high").Queue("q").Priority(5).Pods(1, schedtest.GPU(2, 1000)).Obj()}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if got := evictedGroups(d); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("evicted %v, want old, which checkpointed 5 ago", got)
	}
}

// Reclaim chooses among every queue's eligible victims by the work they
// lose: a victim of a queue just above its fair share that checkpointed a
// moment ago goes before one of the queue furthest above it that would
// lose its whole run. Blind to checkpoints, the furthest queue gives
// first, its newest group (the same start: the first name).
func TestReclaimVictimsAcrossQueuesByWorkLost(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n1", 64000, 1<<20).GPUs(8, "A100").Obj(), schedtest.Node("n2", 64000, 1<<20).GPUs(8, "A100").Obj(),
		schedtest.Node("n3", 64000, 1<<20).GPUs(8, "A100").Obj()}
	// Fair shares are 8 GPUs each (a asks for 8); b holds 14, c 10.
	var running []model.Allocation
	node := func(k int) string { return fmt.Sprintf("n%d", 1+k/4) }
	for k := range 7 {
		running = append(running, runningGroup(fmt.Sprintf("b%d", k), "b", node(k), 0, 2, 500, 0, 0))
	}
	running = append(running, runningGroup("c-saved", "c", node(7), 0, 2, 0, 990, 0))
	for k := 8; k < 12; k++ {
		running = append(running, runningGroup(fmt.Sprintf("c%d", k), "c", node(k), 0, 2, 0, 0, 0))
	}
	big := schedtest.Group("a-big").Queue("a").Pods(1, schedtest.GPU(6, 1000)).Obj()
	big.NeverEvicts = true
	for _, tc := range []struct {
		byAge bool
		want  []string
	}{{false, []string{"c-saved"}}, {true, []string{"b0"}}} {
		t.Run(fmt.Sprintf("byAge=%v", tc.byAge), func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Now: 1000, VictimsByAge: tc.byAge,
				Budget: model.DisruptionBudget{MaxEvictions: -1}, RunningByNode: schedtest.OnNodes(nodes, withIndexes(running...)...),
				Pending: []model.PodGroup{schedtest.Group("a-small").Queue("a").Pods(1, schedtest.GPU(2, 1000)).Obj(), big}}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			if got := evictedGroups(d); !slices.Equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
		})
	}
}
