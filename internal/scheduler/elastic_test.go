package scheduler_test

import (
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// An elastic group (minMember below its pods) gives up its members above
// its minimum to preemption and reclaim before any group is evicted
// whole; the members it gives up wait again and rejoin when room appears.
func TestElasticGroupShrinksBeforeEviction(t *testing.T) {
	one := []model.Node{schedtest.Node("n0", 128000, 1<<20).GPUs(8, "A100").Obj()}
	a := []model.Queue{{Name: "a"}}
	ab := []model.Queue{{Name: "org"},
		{Name: "a", Parent: "org", Guaranteed: model.Resources{GPUMilli: 4000}},
		{Name: "b", Parent: "org", Guaranteed: model.Resources{GPUMilli: 4000}}}
	group := func(name, q string, prio int32, pods, min, gpus int) model.PodGroup {
		b := schedtest.Group(name).Queue(q).Priority(prio).Pods(pods, schedtest.GPU(gpus, 1000))
		if min > 0 {
			b.MinMember(min)
		}
		return b.Obj()
	}
	tests := []struct {
		name          string
		nodes         []model.Node
		queues        []model.Queue
		first         []model.PodGroup
		arrive        model.PodGroup
		wantEvicted   []string
		wantShrink    bool
		wantRemaining map[string]int // running members per group after the eviction
	}{
		{
			name: "preemption takes the last ranks above the minimum", nodes: one, queues: a,
			first:       []model.PodGroup{group("el", "a", 0, 4, 2, 2)},
			arrive:      group("hi", "a", 5, 1, 0, 4),
			wantEvicted: []string{"el-2", "el-3"}, wantShrink: true,
			wantRemaining: map[string]int{"el": 2},
		},
		{
			name: "a shrink spares a cheaper group run whole", nodes: one, queues: a,
			// rigid started last, so whole-group preemption would take it
			// first (the newest); el can give up one 2-GPU member instead.
			first:       []model.PodGroup{group("el", "a", 0, 2, 1, 2), group("rigid", "a", 0, 1, 0, 4)},
			arrive:      group("hi", "a", 5, 1, 0, 2),
			wantEvicted: []string{"el-1"}, wantShrink: true,
			wantRemaining: map[string]int{"el": 1, "rigid": 1},
		},
		{
			name: "a shrink that cannot make room evicts whole", nodes: one, queues: a,
			first:         []model.PodGroup{group("el", "a", 0, 4, 3, 2)},
			arrive:        group("hi", "a", 5, 1, 0, 6),
			wantEvicted:   []string{"el-0", "el-1", "el-2", "el-3"},
			wantRemaining: map[string]int{},
		},
		{
			name: "reclaim shrinks a borrower toward its minimum", nodes: one, queues: ab,
			first:       []model.PodGroup{group("el", "b", 0, 4, 2, 2)},
			arrive:      group("back", "a", 0, 1, 0, 4),
			wantEvicted: []string{"el-2", "el-3"}, wantShrink: true,
			wantRemaining: map[string]int{"el": 2},
		},
		{
			name: "a group declaring no minimum runs whole or not at all", nodes: one, queues: a,
			first:         []model.PodGroup{group("el", "a", 0, 4, 0, 2)},
			arrive:        group("hi", "a", 5, 1, 0, 2),
			wantEvicted:   []string{"el-0", "el-1", "el-2", "el-3"},
			wantRemaining: map[string]int{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: tc.nodes, Queues: tc.queues, Budget: model.DisruptionBudget{MaxEvictions: -1}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range tc.first {
				h.Snap.Pending = append(h.Snap.Pending, g)
				running(h, t)
			}
			if len(h.Snap.Pending) != 0 {
				t.Fatalf("setup left groups pending: %+v", h.Snap.Pending)
			}
			h.Snap.Pending = append(h.Snap.Pending, tc.arrive)
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			var evicted []string
			for _, e := range d.Evictions {
				evicted = append(evicted, e.Pod)
				if e.Shrink != tc.wantShrink || e.For != tc.arrive.Name {
					t.Errorf("eviction %+v: want shrink %v for %s", e, tc.wantShrink, tc.arrive.Name)
				}
			}
			slices.Sort(evicted)
			if !slices.Equal(evicted, tc.wantEvicted) {
				t.Fatalf("evicted %v, want %v", evicted, tc.wantEvicted)
			}
			if len(d.Holds) != 1 || d.Holds[0].Group != tc.arrive.Name {
				t.Fatalf("holds %+v, want one for %s", d.Holds, tc.arrive.Name)
			}
			left := map[string]int{}
			for a := range h.Snap.AllRunning() {
				left[a.Group]++
			}
			for g, n := range tc.wantRemaining {
				if left[g] != n {
					t.Errorf("group %s runs %d members, want %d", g, left[g], n)
				}
			}
			// The preemptor binds where it was held, and nothing is
			// evicted again: the members given up wait.
			for range 3 {
				again, err := h.Cycle()
				if err != nil {
					t.Fatal(err)
				}
				if len(again.Evictions) != 0 {
					t.Fatalf("a later cycle evicts again: %+v", again.Evictions)
				}
			}
			bound := false
			for a := range h.Snap.AllRunning() {
				bound = bound || a.Group == tc.arrive.Name
			}
			if !bound {
				t.Fatalf("%s never bound", tc.arrive.Name)
			}
		})
	}
}

// The members an elastic group gave up rejoin it once room appears: the
// group grows back to all its pods.
func TestElasticGroupGrowsBack(t *testing.T) {
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: []model.Node{schedtest.Node("n0", 128000, 1<<20).GPUs(8, "A100").Obj()},
		Queues: []model.Queue{{Name: "a"}}, Budget: model.DisruptionBudget{MaxEvictions: -1},
		Pending: []model.PodGroup{schedtest.Group("el").Queue("a").MinMember(2).Pods(4, schedtest.GPU(2, 1000)).Obj()}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	running(h, t)
	h.Snap.Pending = append(h.Snap.Pending, schedtest.Group("hi").Queue("a").Priority(5).Pods(1, schedtest.GPU(4, 1000)).Obj())
	running(h, t) // el shrinks to 2, hi is held
	running(h, t) // hi binds
	count := func() (el, hi int) {
		for a := range h.Snap.AllRunning() {
			switch a.Group {
			case "el":
				el++
			case "hi":
				hi++
			}
		}
		return el, hi
	}
	if el, hi := count(); el != 2 || hi != 1 {
		t.Fatalf("el runs %d, hi %d; want 2 and 1", el, hi)
	}
	// hi finishes: el's waiting members take its room.
	var keep []model.Allocation
	for _, a := range schedtest.Running(&h.Snap) {
		if a.Group != "hi" {
			keep = append(keep, a)
		}
	}
	h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, keep...)
	running(h, t)
	if el, _ := count(); el != 4 {
		t.Fatalf("el runs %d members after room appeared, want 4", el)
	}
}

// A member without GPUs (a Ray head, a launcher) stays while members
// holding GPUs can go for a group that needs GPUs; with a budget of one
// eviction, taking the head first would leave none for a worker.
func TestElasticShrinkKeepsMembersWithoutGPUs(t *testing.T) {
	el := model.PodGroup{Name: "rc", Queue: "a", MinMember: 2, Pods: []model.Pod{{Name: "rc-head", Request: model.Request{MilliCPU: 1000}},
		{Name: "rc-gpu-a", Request: schedtest.GPU(2, 1000)}, {Name: "rc-gpu-b", Request: schedtest.GPU(2, 1000)}, {Name: "rc-gpu-c", Request: schedtest.GPU(2, 1000)}}}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: []model.Node{schedtest.Node("n0", 128000, 1<<20).GPUs(6, "A100").Obj()},
		Queues: []model.Queue{{Name: "a"}}, Budget: model.DisruptionBudget{MaxEvictions: 1}, Pending: []model.PodGroup{el}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	running(h, t)
	h.Snap.Pending = append(h.Snap.Pending, schedtest.Group("hi").Queue("a").Priority(5).Pods(1, schedtest.GPU(2, 1000)).Obj())
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Evictions) != 1 || d.Evictions[0].Pod != "rc-gpu-c" || !d.Evictions[0].Shrink {
		t.Fatalf("evictions %+v, want rc-gpu-c alone, shrinking rc", d.Evictions)
	}
}

// A gang's running members count toward its minimum only while they run:
// when a cycle evicts them, the pods of the group still waiting are not
// started, nor given held room, as though they were still there. The
// group waits for its members and starts again whole.
func TestGangOwnEvictionsCountTowardItsMinimum(t *testing.T) {
	nodes := schedtest.Cluster("n", 2, 8, 64000, 1<<20)
	gpus := func(from int) []model.GPUShare {
		out := make([]model.GPUShare, 4)
		for k := range out {
			out[k] = model.GPUShare{Index: from + k, Milli: model.MilliPerGPU}
		}
		return out
	}
	run := func(pod, group, node string, prio int32, minMember, from int) model.Allocation {
		return model.Allocation{Pod: pod, Group: group, Queue: "a", Priority: prio, Node: node, Request: schedtest.GPU(4, 1000),
			GPUs: gpus(from), StartedAt: 1, MinMember: minMember}
	}
	// el runs two of its three pods (its minimum); its third waits.
	el := schedtest.Group("el").Queue("a").MinMember(2).Pods(1, schedtest.GPU(4, 1000)).Obj()
	el.Pods[0].Name, el.Placed = "el-2", 2
	tests := []struct {
		name        string
		running     []model.Allocation
		disrupted   string
		pending     []model.PodGroup
		wantEvicted []string
	}{
		{
			// Preemption evicts el whole for hi; el-2 could preempt low,
			// but a plan of one pod would hold room for a gang of two
			// that no longer runs.
			name: "evicted whole by preemption, the rest holds no room",
			running: []model.Allocation{run("el-0", "el", "n-0", 0, 2, 0), run("el-1", "el", "n-0", 0, 2, 4),
				run("low", "low", "n-1", -1, 0, 0), run("keep", "keep", "n-1", 9, 0, 4)},
			pending:     []model.PodGroup{schedtest.Group("hi").Queue("a").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(), el},
			wantEvicted: []string{"el-0", "el-1"},
		},
		{
			// A node going away evicts el whole; el-2 would fit on n-0,
			// where it would run alone below the gang's minimum.
			name:        "evicted whole by a node going away, the rest is not bound",
			running:     []model.Allocation{run("el-0", "el", "n-0", 0, 2, 0), run("el-1", "el", "n-1", 0, 2, 0)},
			disrupted:   "n-1",
			pending:     []model.PodGroup{el},
			wantEvicted: []string{"el-0", "el-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := slices.Clone(nodes)
			for i := range nodes {
				nodes[i].Disrupted = nodes[i].Name == tc.disrupted
			}
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, tc.running...), Pending: tc.pending,
				Queues: []model.Queue{{Name: "a"}}, Budget: model.DisruptionBudget{MaxEvictions: -1}, Now: 10}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			var evicted []string
			for _, e := range d.Evictions {
				evicted = append(evicted, e.Pod)
			}
			slices.Sort(evicted)
			if !slices.Equal(evicted, tc.wantEvicted) {
				t.Errorf("evicted %v, want %v", evicted, tc.wantEvicted)
			}
			for _, b := range d.Binds {
				if b.Group == "el" {
					t.Errorf("bound %s of el while its running members are evicted", b.Pod)
				}
			}
			for _, h := range d.Holds {
				if h.Group == "el" {
					t.Errorf("held room %+v for el's one waiting pod, below its minimum of 2", h.Plan)
				}
			}
			i := slices.IndexFunc(d.Unplaced, func(u model.Unplaced) bool { return u.Group == "el" })
			if i < 0 {
				t.Fatalf("el not reported unplaced: %+v", d.Unplaced)
			}
			if u := d.Unplaced[i]; u.Code != model.UnplacedMissingMembers || u.Missing != 1 {
				t.Errorf("el unplaced %+v, want %s missing 1", u, model.UnplacedMissingMembers)
			}
		})
	}
}

// The other way round: a gang's waiting pod started in a cycle, counting
// its running members toward the minimum, keeps them; the cycle does not
// evict them whole, which would leave the new pod running alone.
func TestGangGrowingKeepsItsMembers(t *testing.T) {
	nodes := schedtest.Cluster("n", 2, 8, 64000, 1<<20)
	run := func(pod, group, node string, prio int32, minMember, from int) model.Allocation {
		a := model.Allocation{Pod: pod, Group: group, Queue: "a", Priority: prio, Node: node, Request: schedtest.GPU(4, 1000), StartedAt: 1, MinMember: minMember}
		for k := range 4 {
			a.GPUs = append(a.GPUs, model.GPUShare{Index: from + k, Milli: model.MilliPerGPU})
		}
		return a
	}
	el := schedtest.Group("el").Queue("a").MinMember(2).Pods(1, schedtest.GPU(4, 1000)).Obj()
	el.Pods[0].Name, el.Placed = "el-2", 2
	// hi fits only where el runs (keep, above it, holds half of n-1); el-2
	// fits beside keep.
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run("el-0", "el", "n-0", 0, 2, 0), run("el-1", "el", "n-0", 0, 2, 4),
		run("keep", "keep", "n-1", 9, 0, 0)),
		Pending: []model.PodGroup{schedtest.Group("hi").Queue("a").Priority(5).Pods(1, schedtest.GPU(8, 1000)).Obj(), el},
		Queues:  []model.Queue{{Name: "a"}}, Budget: model.DisruptionBudget{MaxEvictions: -1}, Now: 10}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.Binds, func(b model.Bind) bool { return b.Pod == "el-2" }) {
		t.Fatalf("binds %+v, want el-2 started beside keep", d.Binds)
	}
	for _, e := range d.Evictions {
		if e.Group == "el" {
			t.Errorf("evicted %s of el, which started el-2 in the same cycle counting on it", e.Pod)
		}
	}
}
