package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// fragmented is two 8-GPU nodes, each running one 4-GPU pod (groups m0 on
// n0 and m1 on n1): 8 GPUs are free in all, but no node has 8.
func fragmented(movable bool) model.Snapshot {
	nodes := schedtest.Cluster("n", 2, 8, 64000, 1<<20)
	var run []model.Allocation
	for i := range nodes {
		g := fmt.Sprintf("m%d", i)
		run = append(run, model.Allocation{Pod: g + "-0", Group: g, Queue: "a", Node: nodes[i].Name, Request: schedtest.GPU(4, 1000),
			GPUs: []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}, {Index: 2, Milli: 1000}, {Index: 3, Milli: 1000}}, Movable: movable})
	}
	return model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Queues: []model.Queue{{Name: "a"}},
		Budget:  model.DisruptionBudget{MaxEvictions: -1},
		Defrag:  model.DefragPolicy{MaxMoves: 4, Window: 3600},
		Pending: []model.PodGroup{schedtest.Group("big").Queue("a").Pods(1, schedtest.GPU(8, 1000)).Obj()}}
}

func TestDefragmentMovesToFreeANode(t *testing.T) {
	h, err := schedtest.NewHarness(fragmented(true), scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Moves) != 1 || d.Moves[0].For != "big" || d.Moves[0].Pods != 1 || d.Moves[0].GPUMilli != 4000 {
		t.Fatalf("moves %+v, want one 4-GPU group moved for big", d.Moves)
	}
	m := d.Moves[0].Group
	if len(d.Evictions) != 1 || d.Evictions[0].Group != m || d.Evictions[0].Reason != model.EvictDefragment || d.Evictions[0].For != "big" {
		t.Fatalf("evictions %+v, want %s's pod evicted to defragment for big", d.Evictions, m)
	}
	if len(d.Binds) != 0 || len(d.Holds) != 2 {
		t.Fatalf("binds %+v and holds %+v, want two holds and no bind", d.Binds, d.Holds)
	}
	var movedTo, bigOn string
	for _, hd := range d.Holds {
		switch {
		case hd.Group == m && hd.Moved && slices.Equal(hd.Victims, []string{m + "-0"}):
			movedTo = hd.Plan[0].Node
		case hd.Group == "big" && !hd.Moved && slices.Equal(hd.Victims, []string{m + "-0"}):
			bigOn = hd.Plan[0].Node
		default:
			t.Fatalf("unexpected hold %+v", hd)
		}
	}
	if movedTo == "" || bigOn == "" || movedTo == bigOn || bigOn != d.Evictions[0].Node {
		t.Fatalf("%s moved to %q and big held on %q; want big where %s ran (%s), %s elsewhere", m, movedTo, bigOn, m, d.Evictions[0].Node, m)
	}
	// The moved pod left at once (the harness carries evictions out):
	// both holds bind on their plans, and nothing moves again.
	d, err = h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]string{}
	for _, b := range d.Binds {
		on[b.Group] = b.Node
	}
	if on[m] != movedTo || on["big"] != bigOn || len(d.Evictions) != 0 || len(d.Moves) != 0 {
		t.Fatalf("binds %+v, evictions %+v, moves %+v; want %s on %s and big on %s", d.Binds, d.Evictions, d.Moves, m, movedTo, bigOn)
	}
	if len(h.Snap.Defrag.Recent) != 1 || h.Snap.Defrag.Recent[0].Group != m {
		t.Fatalf("recent moves %+v, want the move of %s", h.Snap.Defrag.Recent, m)
	}
	d, err = h.Cycle()
	if err != nil || len(d.Evictions)+len(d.Binds)+len(d.Moves)+len(d.Holds) != 0 {
		t.Fatalf("a third cycle decides %+v (%v), want nothing", d, err)
	}
}

func TestDefragmentRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(*model.Snapshot)
	}{
		{"no group opted in", func(s *model.Snapshot) { *s = fragmented(false) }},
		{"defragmentation off", func(s *model.Snapshot) { s.Defrag = model.DefragPolicy{} }},
		{"moves of the window spent", func(s *model.Snapshot) {
			s.Now = 5000
			s.Defrag.Recent = []model.Move{{Group: "x", At: 2000}, {Group: "y", At: 2000}, {Group: "z", At: 3000}, {Group: "w", At: 4000}}
		}},
		{"both groups moved within the window", func(s *model.Snapshot) {
			s.Now = 5000
			s.Defrag.Recent = []model.Move{{Group: "m0", At: 2000}, {Group: "m1", At: 2000}}
		}},
		{"no evictions allowed", func(s *model.Snapshot) { s.Budget.MaxEvictions = 0 }},
		{"not enough free GPUs in all", func(s *model.Snapshot) {
			s.Pending = []model.PodGroup{schedtest.Group("big").Queue("a").MinMember(2).Pods(2, schedtest.GPU(6, 1000)).Obj()}
		}},
		{"the queue's limit holds the group back", func(s *model.Snapshot) {
			s.Queues = []model.Queue{{Name: "a", Limit: model.Resources{GPUMilli: 12000}}}
		}},
		{"the moved group has nowhere else to go", func(s *model.Snapshot) {
			// A group that may not move takes a fifth GPU of each node:
			// 3 are free on each, 6 in all, and no 3-GPU hole takes a
			// 4-GPU group.
			run := schedtest.Running(s)
			for i, n := range s.Nodes {
				run = append(run, model.Allocation{Pod: fmt.Sprintf("s%d", i), Group: fmt.Sprintf("s%d", i), Queue: "a", Node: n.Name, Request: schedtest.GPU(1, 1000),
					GPUs: []model.GPUShare{{Index: 4, Milli: 1000}}})
			}
			s.RunningByNode = schedtest.OnNodes(s.Nodes, run...)
			s.Pending = []model.PodGroup{schedtest.Group("big").Queue("a").Pods(1, schedtest.GPU(6, 1000)).Obj()}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := fragmented(true)
			tc.edit(&snap)
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Moves) != 0 || len(d.Evictions) != 0 || len(d.Binds) != 0 {
				t.Fatalf("moves %+v, evictions %+v, binds %+v; want none", d.Moves, d.Evictions, d.Binds)
			}
		})
	}
}

// Moves past the window count no more: the budget is per window.
func TestDefragmentWindowPasses(t *testing.T) {
	snap := fragmented(true)
	snap.Now = 10000
	snap.Defrag.Recent = []model.Move{{Group: "m0", At: 1000}, {Group: "m1", At: 1000}, {Group: "x", At: 2000}, {Group: "y", At: 3000}}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Moves) != 1 || d.Moves[0].At != 10000 {
		t.Fatalf("moves %+v, want one at 10000", d.Moves)
	}
}

// Groups whose GPUs are not free in total on their nodes, however
// scattered, have nothing to gather: looking at them uses none of the
// cycle's tries, so the group behind them that waits only for scattered
// GPUs still gets its move.
func TestDefragmentTriesOnlyGroupsWithScatteredRoom(t *testing.T) {
	snap := fragmented(true)
	var ahead []model.PodGroup
	for k := range 5 {
		// 16 GPUs, 8 free: nothing to gather. Never evicting, they leave
		// m0 and m1 alone.
		g := schedtest.Group(fmt.Sprintf("wide%d", k)).Queue("a").Priority(5).Pods(2, schedtest.GPU(8, 1000)).Obj()
		g.NeverEvicts = true
		ahead = append(ahead, g)
	}
	snap.Pending = append(ahead, snap.Pending...)
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Moves) != 1 || d.Moves[0].For != "big" {
		t.Fatalf("moves %+v, want one for big behind five groups with nothing to gather", d.Moves)
	}
}

// With MaxLostWork, a group is moved only while it is that close to its
// restart point: m0 checkpointed 10 s ago and may move, m1 ran 500 s
// past its last checkpoint and stays, so big takes m0's node. With both
// far from their checkpoints nothing moves, and a move waits for the next
// checkpoint.
func TestDefragmentMovesOnlyWorkWithinMaxLostWork(t *testing.T) {
	for _, tc := range []struct {
		name        string
		checkpoints [2]int64 // m0's and m1's LastCheckpoint; Now is 1000
		want        string   // the group moved, "" for none
	}{
		{"m0 fresh", [2]int64{990, 500}, "m0"},
		{"m1 fresh", [2]int64{500, 995}, "m1"},
		{"neither", [2]int64{500, 600}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := fragmented(true)
			snap.Now = 1000
			snap.Defrag.MaxLostWork = 60
			for i := range snap.RunningByNode {
				for k := range snap.RunningByNode[i] {
					a := &snap.RunningByNode[i][k]
					a.LastCheckpoint = tc.checkpoints[a.Group[1]-'0']
				}
			}
			d, _ := runCycle(t, snap)
			var moved string
			if len(d.Moves) == 1 {
				moved = d.Moves[0].Group
			}
			if len(d.Moves) > 1 || moved != tc.want {
				t.Fatalf("moves %+v, want %q moved", d.Moves, tc.want)
			}
		})
	}
}
