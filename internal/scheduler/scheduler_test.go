package scheduler_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

func running(h *schedtest.Harness, t *testing.T) {
	t.Helper()
	if _, err := h.Cycle(); err != nil {
		t.Fatal(err)
	}
}

func TestCycleScenarios(t *testing.T) {
	gq := func(name, parent string, guar, limit int64) model.Queue {
		return model.Queue{Name: name, Parent: parent, Guaranteed: model.Resources{GPUMilli: guar}, Limit: model.Resources{GPUMilli: limit}}
	}
	tests := []struct {
		name string
		// first runs on an empty cluster; then arrive join; the last
		// cycle's decisions are checked.
		nodes         []model.Node
		queues        []model.Queue
		first, arrive []model.PodGroup
		budget        int
		wantBinds     int
		wantEvictions int
		wantReason    string
	}{
		{
			name:      "gang placed whole",
			nodes:     schedtest.Cluster("n", 2, 4, 64000, 1<<20),
			arrive:    []model.PodGroup{schedtest.Group("g").Pods(8, schedtest.GPU(1, 1000)).Obj()},
			wantBinds: 8,
		},
		{
			name:   "gang larger than the cluster places nothing",
			nodes:  schedtest.Cluster("n", 2, 4, 64000, 1<<20),
			arrive: []model.PodGroup{schedtest.Group("g").Pods(9, schedtest.GPU(1, 1000)).Obj()},
		},
		{
			name:      "minMember gang takes what fits",
			nodes:     schedtest.Cluster("n", 1, 4, 64000, 1<<20),
			arrive:    []model.PodGroup{schedtest.Group("g").MinMember(3).Pods(6, schedtest.GPU(1, 1000)).Obj()},
			wantBinds: 4,
		},
		{
			name:          "higher priority preempts lower in its queue",
			nodes:         schedtest.Cluster("n", 1, 2, 64000, 1<<20),
			first:         []model.PodGroup{schedtest.Group("low").Queue("a").Priority(1).Pods(2, schedtest.GPU(1, 1000)).Obj()},
			arrive:        []model.PodGroup{schedtest.Group("high").Queue("a").Priority(5).Pods(1, schedtest.GPU(2, 1000)).Obj()},
			queues:        []model.Queue{gq("a", "", 0, 0)},
			budget:        -1,
			wantBinds:     1,
			wantEvictions: 2,
			wantReason:    "preempt",
		},
		{
			name:      "disruption budget blocks preemption",
			nodes:     schedtest.Cluster("n", 1, 2, 64000, 1<<20),
			first:     []model.PodGroup{schedtest.Group("low").Queue("a").Priority(1).Pods(2, schedtest.GPU(1, 1000)).Obj()},
			arrive:    []model.PodGroup{schedtest.Group("high").Queue("a").Priority(5).Pods(1, schedtest.GPU(2, 1000)).Obj()},
			queues:    []model.Queue{gq("a", "", 0, 0)},
			budget:    1,
			wantBinds: 0,
		},
		{
			name:      "equal priority never preempts",
			nodes:     schedtest.Cluster("n", 1, 2, 64000, 1<<20),
			first:     []model.PodGroup{schedtest.Group("old").Queue("a").Priority(3).Pods(2, schedtest.GPU(1, 1000)).Obj()},
			arrive:    []model.PodGroup{schedtest.Group("new").Queue("a").Priority(3).Pods(1, schedtest.GPU(1, 1000)).Obj()},
			queues:    []model.Queue{gq("a", "", 0, 0)},
			budget:    -1,
			wantBinds: 0,
		},
		{
			name:   "reclaim lent quota up to fair share",
			nodes:  schedtest.Cluster("n", 1, 4, 64000, 1<<20),
			queues: []model.Queue{{Name: "org"}, gq("a", "org", 2000, 0), gq("b", "org", 2000, 0)},
			// b borrows a's idle guarantee, then a wants it back.
			first: []model.PodGroup{schedtest.Group("b1").Queue("b").Pods(1, schedtest.GPU(1, 1000)).Obj(), schedtest.Group("b2").Queue("b").Pods(1, schedtest.GPU(1, 1000)).Obj(),
				schedtest.Group("b3").Queue("b").Pods(1, schedtest.GPU(1, 1000)).Obj(), schedtest.Group("b4").Queue("b").Pods(1, schedtest.GPU(1, 1000)).Obj()},
			arrive:        []model.PodGroup{schedtest.Group("a1").Queue("a").Pods(2, schedtest.GPU(1, 1000)).Obj()},
			budget:        -1,
			wantBinds:     2,
			wantEvictions: 2,
			wantReason:    "reclaim",
		},
		{
			name:      "queue limit holds",
			nodes:     schedtest.Cluster("n", 1, 4, 64000, 1<<20),
			queues:    []model.Queue{gq("a", "", 0, 2000)},
			arrive:    []model.PodGroup{schedtest.Group("a1").Queue("a").Pods(1, schedtest.GPU(2, 1000)).Obj(), schedtest.Group("a2").Queue("a").Pods(1, schedtest.GPU(1, 1000)).Obj()},
			wantBinds: 1,
		},
		{
			name:   "a head its quota holds back does not hold back the queue's other groups",
			nodes:  schedtest.Cluster("n", 1, 4, 64000, 1<<20),
			queues: []model.Queue{gq("a", "", 0, 4000)},
			arrive: []model.PodGroup{
				func() model.PodGroup {
					g := schedtest.Group("huge").Queue("a").Created(1).Pods(2, schedtest.GPU(1, 1000)).Obj()
					g.MinResources = model.Resources{GPUMilli: 6000}
					return g
				}(),
				schedtest.Group("small").Queue("a").Created(2).Pods(1, schedtest.GPU(1, 1000)).Obj(),
			},
			wantBinds: 1,
		},
		{
			name:   "empty cluster places nothing",
			arrive: []model.PodGroup{schedtest.Group("g").Pods(1, schedtest.Share(500, 100)).Obj()},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: tc.nodes, Queues: tc.queues, Pending: tc.first, Budget: model.DisruptionBudget{MaxEvictions: tc.budget}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			running(h, t)
			h.Snap.Pending = append(h.Snap.Pending, tc.arrive...)
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			planned := schedtest.Planned(&d)
			if len(planned) != tc.wantBinds || len(d.Evictions) != tc.wantEvictions {
				t.Fatalf("placements %d evictions %d (%+v), want %d and %d", len(planned), len(d.Evictions), d.Evictions, tc.wantBinds, tc.wantEvictions)
			}
			if (len(d.Holds) > 0) != (len(d.Evictions) > 0) {
				t.Fatalf("holds %+v with evictions %+v: a group that evicts waits for its victims, and only such a group", d.Holds, d.Evictions)
			}
			for _, e := range d.Evictions {
				if e.Reason != tc.wantReason {
					t.Fatalf("eviction reason %q, want %q", e.Reason, tc.wantReason)
				}
			}
			for _, b := range planned {
				if b.Node == "" || len(b.GPUs) == 0 {
					t.Fatalf("bind %+v lacks a node or GPUs", b)
				}
			}
			if len(d.Timings) < 6 {
				t.Fatalf("timings %+v, want one per phase", d.Timings)
			}
		})
	}
}

func TestCycleErrors(t *testing.T) {
	two := schedtest.Cluster("n", 2, 1, 1000, 1000)
	tests := []struct {
		name string
		snap model.Snapshot
		want string
	}{
		{"queue cycle", model.Snapshot{Queues: []model.Queue{{Name: "a", Parent: "b"}, {Name: "b", Parent: "a"}}}, "cycle"},
		{"quota above parent", model.Snapshot{Queues: []model.Queue{{Name: "p", Limit: model.Resources{GPUMilli: 1000}}, {Name: "c", Parent: "p", Limit: model.Resources{GPUMilli: 2000}}}}, "parent"},
		{"running on no node", model.Snapshot{RunningByNode: [][]model.Allocation{{{Pod: "p", Node: "x"}}}}, "1 chunks for 0 nodes"},
		{"duplicate node", model.Snapshot{Nodes: append(schedtest.Cluster("n", 1, 1, 1000, 1000), schedtest.Cluster("n", 1, 1, 1000, 1000)...)}, "twice"},
		{"chunks not aligned with nodes", model.Snapshot{Nodes: two, RunningByNode: [][]model.Allocation{nil}}, "1 chunks for 2 nodes"},
		{"chunk lists another node's pod", model.Snapshot{Nodes: two, RunningByNode: [][]model.Allocation{nil, {{Pod: "p", Node: "n-0"}}}}, "listed under node"},
		{"pod in two chunks", model.Snapshot{Nodes: two, RunningByNode: [][]model.Allocation{{{Pod: "p", Node: "n-0"}}, {{Pod: "p", Node: "n-1"}}}}, "running twice"},
		{"pod twice in one chunk", model.Snapshot{Nodes: two, RunningByNode: [][]model.Allocation{{{Pod: "p", Node: "n-0"}, {Pod: "p", Node: "n-0"}}, nil}}, "running twice"},
		{"over-allocated chunk", model.Snapshot{Nodes: two, RunningByNode: [][]model.Allocation{{
			{Pod: "p", Node: "n-0", GPUs: []model.GPUShare{{Index: 0, Milli: 600}}}, {Pod: "q", Node: "n-0", GPUs: []model.GPUShare{{Index: 0, Milli: 600}}}}, nil}}, "over-allocates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Cycle(&tc.snap); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := scheduler.New(scheduler.Config{Policy: "nope"}); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func TestIncrementalSync(t *testing.T) {
	snap := model.Snapshot{Nodes: schedtest.Cluster("n", 1, 4, 64000, 1<<20),
		Pending: []model.PodGroup{schedtest.Group("g").Pods(2, schedtest.GPU(1, 1000)).Obj()}}
	h, _ := schedtest.NewHarness(snap, scheduler.Config{})
	running(h, t)
	// The pods now run; removing one from the snapshot frees its GPU.
	h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, schedtest.Running(&h.Snap)[1:]...)
	h.Snap.Pending = []model.PodGroup{schedtest.Group("big").Pods(1, schedtest.GPU(3, 1000)).Obj()}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 1 {
		t.Fatalf("3-GPU pod not placed after a GPU was freed: %+v", d)
	}
}

func TestSyncSeesChangedTaints(t *testing.T) {
	tainted := func(value string) []model.Node {
		return []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(1, "A100").Taint("pool", value, "NoSchedule").Obj()}
	}
	tests := []struct {
		name      string
		before    string // the taint's value in the first snapshot
		wantBinds int
	}{
		{"taint value now tolerated", "other", 1},
		{"taint value unchanged", "batch", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			req := schedtest.GPU(1, 1000)
			req.Tolerations = []model.Toleration{{Key: "pool", Value: "batch"}}
			pending := []model.PodGroup{schedtest.Group("g").Pods(1, req).Obj()}
			if _, err := s.Cycle(&model.Snapshot{Nodes: tainted(tc.before)}); err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&model.Snapshot{Nodes: tainted("batch"), Pending: pending})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Binds) != tc.wantBinds {
				t.Fatalf("%d binds, want %d: the scheduler kept a stale taint", len(d.Binds), tc.wantBinds)
			}
		})
	}
}

func TestMinResourcesAdmission(t *testing.T) {
	gpus := func(milli int64) model.Resources { return model.Resources{GPUMilli: milli} }
	// a has a limit of its own; b only its parent's.
	queues := []model.Queue{{Name: "org", Limit: gpus(6000)}, {Name: "a", Parent: "org", Limit: gpus(4000)}, {Name: "b", Parent: "org"}}
	in := func(q string, min model.Resources) model.PodGroup {
		g := schedtest.Group("g").Queue(q).Pods(1, schedtest.GPU(1, 1000)).Obj()
		g.MinResources = min
		return g
	}
	one := func(min model.Resources) model.PodGroup { return in("a", min) }
	tests := []struct {
		name string
		// running GPUs of queue a before g arrives.
		running    int
		group      model.PodGroup
		wantBinds  int
		wantReason string
		// wantCode is the Unplaced code; UnplacedQueueLimit when unset.
		wantCode string
	}{
		{name: "no minResources: the pods' requests", running: 3, group: one(model.Resources{}), wantBinds: 1},
		{name: "minResources below the requests change nothing", running: 3, group: one(gpus(500)), wantBinds: 1},
		{name: "minResources within what the queue has left", running: 2, group: one(gpus(2000)), wantBinds: 1},
		{name: "minResources above what the queue has left", running: 3, group: one(gpus(2000)), wantReason: "queue limit"},
		{name: "minResources alone above the queue's limit", group: one(gpus(5000)), wantCode: model.UnplacedAboveQueueLimit,
			wantReason: `needs cpu 1000m, GPUs 5 admitted, above queue "a"'s limit GPUs 4`},
		{name: "minResources alone above the parent's limit", group: in("b", gpus(7000)), wantCode: model.UnplacedAboveQueueLimit,
			wantReason: `needs cpu 1000m, GPUs 7 admitted, above queue "org"'s limit GPUs 6`},
		{name: "minResources within the parent's limit", group: in("b", gpus(6000)), wantBinds: 1},
		{name: "minResources above what the parent has left", running: 1, group: in("b", gpus(6000)), wantReason: "queue limit"},
		{name: "CPU in minResources without a CPU limit", group: one(model.Resources{MilliCPU: 1 << 40}), wantBinds: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var first []model.PodGroup
			for i := range tc.running {
				first = append(first, schedtest.Group(fmt.Sprintf("r%d", i)).Queue("a").Pods(1, schedtest.GPU(1, 1000)).Obj())
			}
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: schedtest.Cluster("n", 1, 8, 64000, 1<<20), Queues: queues, Pending: first}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			running(h, t)
			h.Snap.Pending = []model.PodGroup{tc.group}
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Binds) != tc.wantBinds {
				t.Fatalf("%d binds, want %d (unplaced %+v)", len(d.Binds), tc.wantBinds, d.Unplaced)
			}
			if tc.wantReason != "" && (len(d.Unplaced) != 1 || d.Unplaced[0].Reason != tc.wantReason || d.Unplaced[0].Code != cmp.Or(tc.wantCode, model.UnplacedQueueLimit)) {
				t.Fatalf("unplaced %+v, want g with code %s, reason %q", d.Unplaced, cmp.Or(tc.wantCode, model.UnplacedQueueLimit), tc.wantReason)
			}
		})
	}
}

func TestSyncReadsOnlyNewChunks(t *testing.T) {
	nodes := schedtest.Cluster("n", 2, 2, 64000, 1<<20)
	on := func(node string, gpu int) model.Allocation {
		return model.Allocation{Pod: "p", Node: node, Request: schedtest.GPU(1, 1000), GPUs: []model.GPUShare{{Index: gpu, Milli: model.MilliPerGPU}}}
	}
	free := func(s *scheduler.Scheduler) [2]int64 {
		return [2]int64{scheduler.StateOf(s).Nodes[0].FreeMilli(), scheduler.StateOf(s).Nodes[1].FreeMilli()}
	}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	chunk := []model.Allocation{on("n-0", 0)}
	cycle := func(chunks ...[]model.Allocation) {
		t.Helper()
		if _, err := s.Cycle(&model.Snapshot{Nodes: nodes, RunningByNode: chunks}); err != nil {
			t.Fatal(err)
		}
	}
	cycle(chunk, nil)
	if got := free(s); got != [2]int64{1000, 2000} {
		t.Fatalf("free milli-GPU %v after p started on n-0", got)
	}
	// Against the contract, the driver changes the chunk it passed, and
	// puts it back after the cycle: the same slice is not read again,
	// which is what makes a cycle cost only what changed. (The core keeps
	// pointers into chunks, so a change left in place would corrupt it.)
	saved := chunk[0]
	chunk[0].GPUs = []model.GPUShare{{Index: 1, Milli: 600}}
	cycle(chunk, nil)
	chunk[0] = saved
	if got := free(s); got != [2]int64{1000, 2000} {
		t.Fatalf("free milli-GPU %v: an unchanged chunk was read again", got)
	}
	// p moves to n-1; n-0's chunk is a new (empty) slice.
	cycle(nil, []model.Allocation{on("n-1", 1)})
	if got := free(s); got != [2]int64{2000, 1000} {
		t.Fatalf("free milli-GPU %v after p moved to n-1", got)
	}
}

// TestQueuePriority: a queue of higher priority takes its turns before its
// siblings whatever their shares; siblings of equal priority go by share;
// priority compares siblings, so a child's priority does not lift it above
// its parent's siblings.
func TestQueuePriority(t *testing.T) {
	tests := []struct {
		name   string
		queues []model.Queue
		// running: GPUs each queue already holds.
		running map[string]int
		// want: the queue whose groups get the 4 free GPUs.
		want string
	}{
		{
			name:    "equal priorities: the lower share first",
			queues:  []model.Queue{{Name: "org"}, {Name: "hi", Parent: "org"}, {Name: "lo", Parent: "org"}},
			running: map[string]int{"hi": 4},
			want:    "lo",
		},
		{
			name:    "higher priority first, though its share is larger",
			queues:  []model.Queue{{Name: "org"}, {Name: "hi", Parent: "org", Priority: 10}, {Name: "lo", Parent: "org"}},
			running: map[string]int{"hi": 4},
			want:    "hi",
		},
		{
			name: "priority compares where the branches part",
			queues: []model.Queue{{Name: "big", Priority: 5}, {Name: "small"},
				{Name: "hi", Parent: "small", Priority: 100}, {Name: "lo", Parent: "big"}},
			running: map[string]int{"lo": 4},
			want:    "lo",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: schedtest.Cluster("n", 1, 8, 64000, 1<<20), Queues: tc.queues, Budget: model.DisruptionBudget{MaxEvictions: 0}}
			gpu := 0
			var running []model.Allocation
			for q, n := range tc.running {
				for range n {
					running = append(running, model.Allocation{Pod: fmt.Sprintf("%s-run-%d", q, gpu), Queue: q, Node: "n-0",
						Request: schedtest.GPU(1, 1000), GPUs: []model.GPUShare{{Index: gpu, Milli: 1000}}})
					gpu++
				}
			}
			snap.RunningByNode = schedtest.OnNodes(snap.Nodes, running...)
			for _, q := range []string{"hi", "lo"} {
				snap.Pending = append(snap.Pending, schedtest.Group(q+"-job").Queue(q).Pods(4, schedtest.GPU(1, 1000)).Obj())
			}
			d := cycleOnce(t, &snap)
			if len(d.Binds) != 4 || d.Binds[0].Group != tc.want+"-job" {
				t.Fatalf("binds %+v, want the 4 pods of %s-job", d.Binds, tc.want)
			}
		})
	}
}

// cycleOnce runs one cycle of a new scheduler with the default config.
func cycleOnce(tb interface {
	Helper()
	Fatal(args ...any)
}, snap *model.Snapshot) model.Decisions {
	tb.Helper()
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	d, err := s.Cycle(snap)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// TestExplainAndQueueStatus: the core says why a group it was asked about
// waits (which filter refused how many nodes, how much of the gang fits)
// and every queue's usage and fair share, so that no driver works either
// out again.
func TestExplainAndQueueStatus(t *testing.T) {
	nodes := []model.Node{
		schedtest.Node("busy", 64000, 1<<20).GPUs(4, "A100").Obj(),
		schedtest.Node("small", 64000, 1<<20).GPUs(2, "A100").Obj(),
		schedtest.Node("tainted", 64000, 1<<20).GPUs(8, "A100").Taint("pool", "batch", "NoSchedule").Obj(),
		schedtest.Node("cordoned", 64000, 1<<20).GPUs(8, "A100").Obj(),
		schedtest.Node("tiny-cpu", 1000, 1<<20).GPUs(8, "A100").Obj(),
	}
	nodes[3].Unschedulable = true
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "team", Guaranteed: model.Resources{GPUMilli: 4000}}},
		Pending: []model.PodGroup{schedtest.Group("fill").Queue("team").Pods(1, schedtest.GPU(4, 4000)).Obj()}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	running(h, t)
	gang := schedtest.Group("gang").Queue("team").MinMember(3).Pods(3, schedtest.GPU(2, 4000)).Obj()
	quiet := schedtest.Group("quiet").Queue("team").Pods(1, schedtest.GPU(8, 4000)).Obj()
	gang.Explain = true
	h.Snap.Pending = []model.PodGroup{gang, quiet}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]model.Unplaced{}
	for _, u := range d.Unplaced {
		byName[u.Group] = u
	}
	u := byName["gang"]
	// One node each, in the order the filters run: cordoned, tainted,
	// too little CPU, GPUs taken; "small" holds one pod of the gang.
	want := []model.FilterCount{{Filter: "node unschedulable", Nodes: 1}, {Filter: "node selector or taints", Nodes: 1},
		{Filter: "insufficient cpu", Nodes: 1}, {Filter: "insufficient gpu", Nodes: 1}}
	if !u.Explained || u.Nodes != 5 || u.Placeable != 1 || !slices.Equal(u.Filtered, want) {
		t.Errorf("gang explained as %+v, want 5 nodes, 1 placeable, filtered %v", u, want)
	}
	if q := byName["quiet"]; q.Explained || q.Code != model.UnplacedNoFit {
		t.Errorf("a group not asked about was explained: %+v", q)
	}
	if len(d.Queues) == 0 || d.Queues[len(d.Queues)-1].Name != "team" && d.Queues[0].Name != "team" {
		t.Fatalf("queues %+v, want team", d.Queues)
	}
	for _, q := range d.Queues {
		if q.Name == "team" && (q.Usage.GPUMilli != 4000 || q.Guaranteed.GPUMilli != 4000 || q.FairShare.GPUMilli == 0) {
			t.Errorf("team's status %+v: want 4 GPUs in use, 4 guaranteed and a fair share", q)
		}
	}
}

// A group that can never start as it is says so, with what it needs and the
// limit it exceeds, rather than waiting as if room could appear: its
// minMember pods above its queue's limit (or a parent's), or more than every
// node of the cluster has together. A group that only waits for room keeps
// the reasons it had.
func TestNeverFits(t *testing.T) {
	gpus := func(n int64) model.Resources { return model.Resources{GPUMilli: n * model.MilliPerGPU} }
	queues := []model.Queue{{Name: "org", Limit: gpus(6)}, {Name: "a", Parent: "org", Limit: gpus(3)}, {Name: "b", Parent: "org"}}
	// Two nodes of 8 GPUs: 16 in all.
	nodes := schedtest.Cluster("n", 2, 8, 64000, 1<<20)
	tests := []struct {
		name      string
		group     model.PodGroup
		wantCode  string
		wantQueue string
		wantNeed  int64 // GPUs
	}{
		{name: "minMember 4 of 1 GPU above its queue's limit of 3",
			group:    schedtest.Group("g").Queue("a").MinMember(4).Pods(4, schedtest.GPU(1, 0)).Obj(),
			wantCode: model.UnplacedAboveQueueLimit, wantQueue: "a", wantNeed: 4},
		{name: "minMember 7 above the parent's limit of 6",
			group:    schedtest.Group("g").Queue("b").MinMember(7).Pods(7, schedtest.GPU(1, 0)).Obj(),
			wantCode: model.UnplacedAboveQueueLimit, wantQueue: "org", wantNeed: 7},
		{name: "minMember 3 of 8 GPUs above the cluster's 16",
			group:    schedtest.Group("g").Queue("default").MinMember(3).Pods(3, schedtest.GPU(8, 0)).Obj(),
			wantCode: model.UnplacedAboveCapacity, wantNeed: 24},
		{name: "minMember 3 of 5 GPUs fits the cluster's 16 in sum but not its nodes: it waits",
			group:    schedtest.Group("g").Queue("default").MinMember(3).Pods(3, schedtest.GPU(5, 0)).Obj(),
			wantCode: model.UnplacedNoFit},
		{name: "more pods than minMember: only the minMember smallest count",
			group:    schedtest.Group("g").Queue("default").MinMember(2).Pods(2, schedtest.GPU(8, 0)).Pods(1, schedtest.GPU(6, 0)).Obj(),
			wantCode: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Queues: queues, Pending: []model.PodGroup{tc.group}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCode == "" {
				if len(d.Unplaced) != 0 {
					t.Fatalf("unplaced %+v, want the group placed", d.Unplaced)
				}
				return
			}
			if len(d.Binds) != 0 || len(d.Unplaced) != 1 {
				t.Fatalf("%d binds, unplaced %+v; want g unplaced whole", len(d.Binds), d.Unplaced)
			}
			u := d.Unplaced[0]
			if u.Code != tc.wantCode {
				t.Fatalf("code %s (%s), want %s", u.Code, u.Reason, tc.wantCode)
			}
			if tc.wantNeed > 0 && u.Need.GPUMilli != tc.wantNeed*model.MilliPerGPU {
				t.Errorf("need %+v, want %d GPUs", u.Need, tc.wantNeed)
			}
			switch tc.wantCode {
			case model.UnplacedAboveQueueLimit:
				if u.Queue != tc.wantQueue || u.Limit.GPUMilli == 0 || !strings.Contains(u.Reason, fmt.Sprintf("above queue %q's limit", tc.wantQueue)) {
					t.Errorf("queue %q limit %+v reason %q; want queue %s's limit", u.Queue, u.Limit, u.Reason, tc.wantQueue)
				}
			case model.UnplacedAboveCapacity:
				if u.Capacity.GPUMilli != 16*model.MilliPerGPU || !strings.Contains(u.Reason, "more than all nodes have together (cpu 128000m, memory 2097152Mi, GPUs 16)") {
					t.Errorf("capacity %+v reason %q; want the cluster's 16 GPUs", u.Capacity, u.Reason)
				}
			}
		})
	}
}
