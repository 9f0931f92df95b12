package scheduler_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// drainable is three 8-GPU nodes where no node is empty and none holds
// only movable work: n0 runs u0 (2 GPUs, not movable) and m0 (3 GPUs,
// movable), n1 runs u1 (4 GPUs) and n2 runs u2 (4 GPUs). big (queue a,
// 8 GPUs) has waited since 0; small (queue b, 3 GPUs) has just come, and
// best fit alone puts it on n-0, the one node big could have soonest.
func drainable(now, drainAfter int64) model.Snapshot {
	nodes := schedtest.Cluster("n", 3, 8, 64000, 1<<20)
	run := []model.Allocation{wholeGPUs("u0", "n-0", 0, 2, false), wholeGPUs("m0", "n-0", 2, 3, true), wholeGPUs("u1", "n-1", 0, 4, false), wholeGPUs("u2", "n-2", 0, 4, false)}
	return model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Now: now,
		Queues:  []model.Queue{{Name: "a"}, {Name: "b"}},
		Budget:  model.DisruptionBudget{MaxEvictions: -1},
		Defrag:  model.DefragPolicy{MaxMoves: 4, Window: 3600, DrainAfter: drainAfter},
		Pending: []model.PodGroup{schedtest.Group("big").Queue("a").Created(0).Pods(1, schedtest.GPU(8, 1000)).Obj(), schedtest.Group("small").Queue("b").Created(now).Pods(1, schedtest.GPU(3, 1000)).Obj()}}
}

// wholeGPUs is the one pod of group name in queue b on node, holding
// gpus whole GPUs from index first, movable or not.
func wholeGPUs(name, node string, first, gpus int, movable bool) model.Allocation {
	a := model.Allocation{Pod: name + "-0", Group: name, Queue: "b", Node: node, Request: schedtest.GPU(gpus, 1000), Movable: movable}
	for g := first; g < first+gpus; g++ {
		a.GPUs = append(a.GPUs, model.GPUShare{Index: g, Milli: model.MilliPerGPU})
	}
	return a
}

func bindsOf(d model.Decisions) map[string]string {
	on := map[string]string{}
	for _, b := range schedtest.Planned(&d) {
		on[b.Group] = b.Node
	}
	return on
}

// A gang that has waited DrainAfter for a whole node has the node
// cheapest to empty (n0: 2 GPUs that may not move) kept for it: new work
// goes elsewhere, and the gang's reason names the node and what stands
// there. Before DrainAfter, or with moves off, nothing is kept and the
// reason names no node.
func TestDrainKeepsNewWorkOffTheCheapestNode(t *testing.T) {
	kept := []model.KeptNode{{Node: "n-0", Fixed: 2000, Movable: 3000}}
	for _, tc := range []struct {
		name            string
		now, drainAfter int64
		maxMoves        int
		wantSmall       string
		wantKept        []model.KeptNode
	}{
		{"waited", 5000, 3600, 4, "n-1", kept},
		{"not yet", 3000, 3600, 4, "n-0", nil},
		{"drains off", 5000, 0, 4, "n-0", nil},
		{"moves off", 5000, 3600, 0, "n-0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := drainable(tc.now, tc.drainAfter)
			snap.Defrag.MaxMoves = tc.maxMoves
			d := bestFitCycle(t, snap)
			on := bindsOf(d)
			if on["small"] != tc.wantSmall || on["big"] != "" || len(d.Evictions) != 0 {
				t.Fatalf("placed %v, evictions %+v; want small on %s, big waiting, nothing evicted", on, d.Evictions, tc.wantSmall)
			}
			u := unplacedOf(&d, "big")
			if u == nil || u.Code != model.UnplacedNoFit || u.Wait != model.WaitCapacity || !reflect.DeepEqual(u.Kept, tc.wantKept) {
				t.Fatalf("big unplaced %+v; want %s waiting for capacity with kept nodes %+v", u, model.UnplacedNoFit, tc.wantKept)
			}
			if named := strings.Contains(u.Reason, "n-0"); named != (tc.wantKept != nil) {
				t.Fatalf("big's reason %q: naming n-0 is %v, want %v", u.Reason, named, tc.wantKept != nil)
			}
		})
	}
}

// A node kept free for a gang stays closed to every other group for the
// rest of the cycle, including the room that frees there after the drain:
// urgent (2 GPUs, priority 10) fits only by preempting f0 on n-0, which
// is kept for big, so it evicts nothing and waits, told that the node is
// kept, while f0's GPUs stay where big needs them once f0 ends.
func TestDrainKeepsRoomFreedLaterInTheCycle(t *testing.T) {
	nodes := schedtest.Cluster("n", 2, 8, 64000, 1<<20)
	f0, f1 := wholeGPUs("f0", "n-0", 0, 2, false), wholeGPUs("f1", "n-1", 0, 8, false)
	f1.Priority = 100
	urgent := schedtest.Group("urgent").Queue("b").Priority(10).Created(5000).Pods(1, schedtest.GPU(2, 1000)).Obj()
	urgent.Explain = true
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, f0, f1), Now: 5000,
		Queues:  []model.Queue{{Name: "a"}, {Name: "b"}},
		Budget:  model.DisruptionBudget{MaxEvictions: -1},
		Defrag:  model.DefragPolicy{MaxMoves: 4, Window: 3600, DrainAfter: 3600},
		Pending: []model.PodGroup{schedtest.Group("big").Queue("a").Created(0).Pods(1, schedtest.GPU(8, 1000)).Obj(), urgent}}
	d := bestFitCycle(t, snap)
	if on := bindsOf(d); len(on) != 0 || len(d.Evictions) != 0 || len(d.Holds) != 0 {
		t.Fatalf("placed %v, evictions %+v, holds %+v; want nothing placed on n-0, kept for big", on, d.Evictions, d.Holds)
	}
	if u := unplacedOf(&d, "big"); u == nil || len(u.Kept) != 1 || u.Kept[0].Node != "n-0" {
		t.Fatalf("big unplaced %+v; want n-0 kept for it", u)
	}
	u := unplacedOf(&d, "urgent")
	if u == nil || !slices.Contains(u.Filtered, model.FilterCount{Filter: placement.FilterKept, Nodes: 1}) {
		t.Fatalf("urgent unplaced %+v; want one node filtered as %q", u, placement.FilterKept)
	}
}

// The reason says, per node kept, what the group waits for there: the
// pods that may not move to end, the movable ones to be moved off, or
// nothing; it names a few nodes and counts the rest.
func TestKeptReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		kept []model.KeptNode
		want string
	}{
		{"fixed and movable", []model.KeptNode{{Node: "a", Fixed: 2000, Movable: 3000}},
			"node a is kept free for it: it waits for the pods there that may not move (2 GPUs) to end, then the movable ones (3 GPUs) are moved off"},
		{"fixed only", []model.KeptNode{{Node: "a", Fixed: 1000}},
			"node a is kept free for it: it waits for the pods there that may not move (1 GPU) to end"},
		{"movable only", []model.KeptNode{{Node: "a", Movable: 2500}},
			"node a is kept free for it: it waits for the movable pods there (2.5 GPUs) to be moved off"},
		{"movable, part of it waiting for a checkpoint", []model.KeptNode{{Node: "a", Movable: 3000, Unsaved: 1000}},
			"node a is kept free for it: it waits for the movable pods there (3 GPUs) to be moved off, 1 GPU of them once they checkpoint"},
		{"fixed, and movable waiting for a checkpoint", []model.KeptNode{{Node: "a", Fixed: 1000, Movable: 2000, Unsaved: 2000}},
			"node a is kept free for it: it waits for the pods there that may not move (1 GPU) to end, then the movable ones (2 GPUs) are moved off, 2 GPUs of them once they checkpoint"},
		{"empty", []model.KeptNode{{Node: "a"}},
			"node a is kept free for it: no pod there holds a GPU"},
		{"many", []model.KeptNode{{Node: "a", Fixed: 1000}, {Node: "b", Fixed: 1000}, {Node: "c", Fixed: 1000}, {Node: "d", Movable: 1000}, {Node: "e"}, {Node: "f"}},
			"node a is kept free for it: it waits for the pods there that may not move (1 GPU) to end; " +
				"node b is kept free for it: it waits for the pods there that may not move (1 GPU) to end; " +
				"node c is kept free for it: it waits for the pods there that may not move (1 GPU) to end; " +
				"node d is kept free for it: it waits for the movable pods there (1 GPU) to be moved off; and 2 more nodes are kept free for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scheduler.KeptReason(tc.kept); got != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Once the work that may not move has left the drained node, the movable
// work is moved off it and the gang is held there; the next cycle binds
// both, and the drained node stays kept while its fixed work runs.
func TestDrainMovesTheLastMovableWorkOff(t *testing.T) {
	h, _ := harnessCycle(t, drainable(5000, 3600), bestFit)
	// Another cycle while u0 runs: n0 stays kept, nothing moves.
	h.Snap.Now += 60
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Moves)+len(d.Binds)+len(d.Holds)+len(d.Evictions) != 0 {
		t.Fatalf("while u0 runs the cycle decided %+v, want nothing", d)
	}
	if u := unplacedOf(&d, "big"); u == nil || !reflect.DeepEqual(u.Kept, []model.KeptNode{{Node: "n-0", Fixed: 2000, Movable: 3000}}) {
		t.Fatalf("big unplaced %+v while u0 runs; want n-0 kept with u0's 2 GPUs fixed and m0's 3 movable", u)
	}
	// u0 ends.
	var keep []model.Allocation
	for _, a := range schedtest.Running(&h.Snap) {
		if a.Group != "u0" {
			keep = append(keep, a)
		}
	}
	h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, keep...)
	h.Snap.Now += 60
	d, err = h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Moves) != 1 || d.Moves[0].Group != "m0" || d.Moves[0].For != "big" {
		t.Fatalf("moves %+v, want m0 moved for big", d.Moves)
	}
	if u := unplacedOf(&d, "big"); u == nil || u.Code != model.UnplacedWaitingForVictims || u.Kept != nil {
		t.Fatalf("big unplaced %+v once m0 moves; want it waiting for m0's pod, no node kept", u)
	}
	on := bindsOf(d)
	if on["big"] != "n-0" || on["m0"] == "" || on["m0"] == "n-0" {
		t.Fatalf("planned %v, want big held on n-0 and m0 elsewhere", on)
	}
	d, err = h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if on := bindsOf(d); on["big"] != "n-0" || len(d.Binds) != 2 {
		t.Fatalf("binds %+v, want big bound on n-0 and m0 where it was moved", d.Binds)
	}
}

// Once only movable work stands on the kept node but it may not move
// yet (it moved within the window), the node stays kept and the reason
// says the gang waits for that work to be moved off.
func TestDrainWaitsForMovableWork(t *testing.T) {
	snap := drainable(5000, 3600)
	var keep []model.Allocation
	for _, a := range schedtest.Running(&snap) {
		if a.Group != "u0" {
			keep = append(keep, a)
		}
	}
	snap.RunningByNode = schedtest.OnNodes(snap.Nodes, keep...)
	snap.Defrag.Recent = []model.Move{{Group: "m0", For: "other", At: 4000, Pods: 1, GPUMilli: 3000}}
	d := bestFitCycle(t, snap)
	if on := bindsOf(d); on["small"] != "n-1" || len(d.Moves)+len(d.Evictions) != 0 {
		t.Fatalf("placed %v, moves %+v; want small on n-1 and nothing moved", on, d.Moves)
	}
	u := unplacedOf(&d, "big")
	if u == nil || !reflect.DeepEqual(u.Kept, []model.KeptNode{{Node: "n-0", Movable: 3000}}) ||
		u.Reason != "node n-0 is kept free for it: it waits for the movable pods there (3 GPUs) to be moved off" {
		t.Fatalf("big unplaced %+v; want n-0 kept with only m0's 3 GPUs, movable, standing there", u)
	}
}

// bestFit is the scheduler the drain tests run: best fit makes the node
// each pod lands on plain to read.
var bestFit = scheduler.Config{Policy: "bestfit"}

// bestFitCycle runs one cycle of a best-fit scheduler on snap.
func bestFitCycle(t *testing.T, snap model.Snapshot) model.Decisions {
	t.Helper()
	_, d := harnessCycle(t, snap, bestFit)
	return d
}

// With a bound on the work a move throws away, the movable groups on a
// drained node seldom all sit within it of their checkpoints at once.
// Each is moved off as soon as it does, the room it leaves kept with the
// rest of the node, and the gang is held there once the last one moves:
// m0 checkpointed just now and goes at once; m1, which has not
// checkpointed since it started, stays until it does, and the reason
// says so.
func TestDrainMovesEachGroupOnceItCheckpoints(t *testing.T) {
	const now, bound = 5000, 600
	nodes := schedtest.Cluster("n", 3, 8, 64000, 1<<20)
	m0 := wholeGPUs("m0", "n-0", 0, 3, true)
	m0.LastCheckpoint = now - 60
	snap := model.Snapshot{Nodes: nodes, Now: now,
		RunningByNode: schedtest.OnNodes(nodes, m0, wholeGPUs("m1", "n-0", 3, 3, true), wholeGPUs("u1", "n-1", 0, 4, false), wholeGPUs("u2", "n-2", 0, 4, false)),
		Queues:        []model.Queue{{Name: "a"}, {Name: "b"}},
		Budget:        model.DisruptionBudget{MaxEvictions: -1},
		Defrag:        model.DefragPolicy{MaxMoves: 4, Window: 3600, DrainAfter: 3600, MaxLostWork: bound},
		Pending:       []model.PodGroup{schedtest.Group("big").Queue("a").Created(0).Pods(1, schedtest.GPU(8, 1000)).Obj()}}
	h, d := harnessCycle(t, snap, bestFit)
	if len(d.Moves) != 1 || d.Moves[0].Group != "m0" || d.Moves[0].For != "big" {
		t.Fatalf("moves %+v, want m0 moved ahead for big", d.Moves)
	}
	if on := bindsOf(d); on["big"] != "" || on["m0"] == "" || on["m0"] == "n-0" {
		t.Fatalf("planned %v, want m0 held off n-0 and big not placed", on)
	}
	u := unplacedOf(&d, "big")
	if u == nil || !reflect.DeepEqual(u.Kept, []model.KeptNode{{Node: "n-0", Movable: 3000, Unsaved: 3000}}) ||
		u.Reason != "node n-0 is kept free for it: it waits for the movable pods there (3 GPUs) to be moved off, 3 GPUs of them once they checkpoint" {
		t.Fatalf("big unplaced %+v; want n-0 kept for m1's 3 GPUs, waiting for its checkpoint", u)
	}
	// m0 binds where it was moved; m1 still has not checkpointed, and
	// n-0 stays kept.
	h.Snap.Now += 60
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if on := bindsOf(d); on["m0"] == "" || on["m0"] == "n-0" || on["big"] != "" || len(d.Moves) != 0 {
		t.Fatalf("planned %v, moves %+v; want m0 bound off n-0, big still waiting", on, d.Moves)
	}
	if u := unplacedOf(&d, "big"); u == nil || !reflect.DeepEqual(u.Kept, []model.KeptNode{{Node: "n-0", Movable: 3000, Unsaved: 3000}}) {
		t.Fatalf("big unplaced %+v; want n-0 still kept for m1", u)
	}
	// m1 checkpoints: it is moved off and big is held on n-0.
	var run []model.Allocation
	for _, a := range schedtest.Running(&h.Snap) {
		if a.Group == "m1" {
			a.LastCheckpoint = h.Snap.Now
		}
		run = append(run, a)
	}
	h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, run...)
	h.Snap.Now += 60
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	if len(d.Moves) != 1 || d.Moves[0].Group != "m1" || bindsOf(d)["big"] != "n-0" {
		t.Fatalf("moves %+v, planned %v; want m1 moved and big held on n-0", d.Moves, bindsOf(d))
	}
}
