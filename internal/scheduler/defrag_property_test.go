package scheduler_test

import (
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// genFragmenting draws 8-GPU nodes filled by groups of 1 to 4 GPUs, some
// movable and some elastic, in queues with guarantees and priorities, and
// a later batch of whole-node gangs: once some of the first groups leave,
// free GPUs are scattered and only moves (or preemption, reclaim and
// shrinking) make room for the gangs, or drains keep new work off nodes
// for them.
func genFragmenting(t *rapid.T) (model.Snapshot, []model.PodGroup) {
	snap := model.Snapshot{Nodes: schedtest.Cluster("n", rapid.IntRange(2, 5).Draw(t, "nodes"), 8, 64000, 1<<20),
		Budget: model.DisruptionBudget{MaxEvictions: rapid.SampledFrom([]int{-1, 4}).Draw(t, "budget")},
		Defrag: model.DefragPolicy{MaxMoves: rapid.SampledFrom([]int{1, 3, 100}).Draw(t, "moves"), Window: rapid.SampledFrom([]int64{1, 1000}).Draw(t, "window"),
			// Drains for the whole-node gangs from the start, after some
			// cycles, or never.
			DrainAfter: rapid.SampledFrom([]int64{0, 1, 50}).Draw(t, "drainAfter"),
			// Moves of any work, or only of groups that started or
			// checkpointed within the last few cycles.
			MaxLostWork: rapid.SampledFrom([]int64{0, 3, 30}).Draw(t, "maxLostWork")}}
	queues := []string{"a", "b"}
	snap.Queues = []model.Queue{{Name: "org"}}
	for _, q := range queues {
		snap.Queues = append(snap.Queues, model.Queue{Name: q, Parent: "org", Guaranteed: model.Resources{GPUMilli: rapid.Int64Range(0, 8).Draw(t, "guar") * 1000}})
	}
	group := func(name string, gpus []int, most int, created int64) model.PodGroup {
		b := schedtest.Group(name).Queue(rapid.SampledFrom(queues).Draw(t, "queue")).Priority(int32(rapid.IntRange(0, 2).Draw(t, "prio"))).Created(created)
		size := rapid.IntRange(1, most).Draw(t, "size")
		b.Pods(size, schedtest.GPU(rapid.SampledFrom(gpus).Draw(t, "gpus"), 1000))
		if rapid.Bool().Draw(t, "elastic") {
			b.MinMember(rapid.IntRange(1, size).Draw(t, "min"))
		}
		g := b.Obj()
		g.Movable = rapid.IntRange(0, 3).Draw(t, "movable") > 0
		return g
	}
	for i := range rapid.IntRange(2, 4*len(snap.Nodes)).Draw(t, "first") {
		snap.Pending = append(snap.Pending, group(fmt.Sprintf("g%d", i), []int{1, 2, 4}, 3, int64(i)))
	}
	var later []model.PodGroup
	for i := range rapid.IntRange(1, 3).Draw(t, "later") {
		g := group(fmt.Sprintf("h%d", i), []int{4, 8}, 2, int64(100+i))
		// A gang that may not evict waits for room, which only moves make.
		g.NeverEvicts = rapid.Bool().Draw(t, "neverEvicts")
		later = append(later, g)
	}
	return snap, later
}

// Moves, drains, shrinks, preemption and reclaim together keep every
// invariant and reach a fixed point on an unchanged workload, whatever
// the move budget: the argument of doc.go ("Why moves cannot loop").
func TestPropertyDefragmentFixedPoint(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, later := genFragmenting(t)
		h, err := schedtest.NewHarness(snap, scheduler.Config{Policy: rapid.SampledFrom([]string{"gpuplane", "bestfit"}).Draw(t, "policy")})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			propertyStep(t, h)
		}
		// Some groups finish: their room is scattered over the nodes.
		var keep []model.Allocation
		for _, a := range schedtest.Running(&h.Snap) {
			if rapid.IntRange(0, 2).Draw(t, "leaves") == 0 {
				continue
			}
			keep = append(keep, a)
		}
		h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, keep...)
		h.Snap.Pending = append(h.Snap.Pending, later...)
		// The gangs drains run for: a drain places one that fits at once,
		// before any node is kept.
		whole := map[string]bool{}
		for _, g := range later {
			for _, p := range g.Pods {
				whole[g.Name] = whole[g.Name] || p.Request.GPUs == 8
			}
		}
		// A quiet cycle is a fixed point only once the later gangs have
		// waited long enough to be drained for.
		var drainFrom int64
		if snap.Defrag.DrainAfter > 0 {
			for _, g := range later {
				drainFrom = max(drainFrom, g.CreatedAt+snap.Defrag.DrainAfter)
			}
		}
		// While they wait, a few groups that may not move finish, one at
		// a time: a drained node may be left with movable work alone. And
		// a few movable groups checkpoint, one at a time: under
		// MaxLostWork a drained node's movable groups become free to
		// move at different times.
		departures := rapid.IntRange(0, 3).Draw(t, "departures")
		checkpoints := rapid.IntRange(0, 3).Draw(t, "checkpoints")
		for i := 0; ; i++ {
			if checkpoints > 0 && h.Snap.Now >= drainFrom && rapid.Bool().Draw(t, "checkpoint") {
				checkpoints--
				run := schedtest.Running(&h.Snap)
				var movable []int
				for k, a := range run {
					if a.Movable {
						movable = append(movable, k)
					}
				}
				if len(movable) > 0 {
					g := run[rapid.SampledFrom(movable).Draw(t, "checkpointed")].Group
					for k := range run {
						if run[k].Group == g {
							run[k].LastCheckpoint = h.Snap.Now
						}
					}
					h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, run...)
				}
			}
			if departures > 0 && h.Snap.Now >= drainFrom && rapid.Bool().Draw(t, "depart") {
				departures--
				var keep []model.Allocation
				gone := ""
				for _, a := range schedtest.Running(&h.Snap) {
					if gone == "" && !a.Movable {
						gone = a.Group
					}
					if a.Group != gone {
						keep = append(keep, a)
					}
				}
				h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, keep...)
			}
			held := h.Snap.Holds
			d := propertyStep(t, h)
			checkKept(t, held, whole, &d)
			if len(d.Evictions) == 0 && len(d.Binds) == 0 && len(d.Holds) == 0 && h.Snap.Now >= drainFrom && departures == 0 && checkpoints == 0 {
				break
			}
			if i > 60 {
				t.Fatalf("no fixed point after %d cycles: last %d binds, %d evictions, %d moves", i, len(d.Binds), len(d.Evictions), len(d.Moves))
			}
		}
	})
}

// checkKept: a node the cycle kept free for a waiting group is kept for
// that group alone, and no pod of another group is bound there in the
// cycle, but those placed before drains choose their nodes: the holds
// made before it, and the whole-node gangs drains place at once.
func checkKept(t *rapid.T, held []model.Hold, whole map[string]bool, d *model.Decisions) {
	keptFor := map[string]string{}
	for _, u := range d.Unplaced {
		if len(u.Kept) > 0 && u.Code != model.UnplacedNoFit {
			t.Fatalf("group %s waits (%s) with nodes kept for it %+v", u.Group, u.Code, u.Kept)
		}
		for _, k := range u.Kept {
			if g, dup := keptFor[k.Node]; dup {
				t.Fatalf("node %s kept for both %s and %s", k.Node, g, u.Group)
			}
			keptFor[k.Node] = u.Group
		}
	}
	wasHeld := map[string]bool{}
	for _, hd := range held {
		wasHeld[hd.Group] = true
	}
	for _, b := range d.Binds {
		if g, ok := keptFor[b.Node]; ok && g != b.Group && !wasHeld[b.Group] && !whole[b.Group] {
			t.Fatalf("%s of %s bound on %s, kept free for %s", b.Pod, b.Group, b.Node, g)
		}
	}
}

// A try for a group alike the last one whose try searched and moved
// nothing is not made: it would repeat that search move for move and fail
// as well. The same workloads, cycle by cycle, with the search made again
// and without it, decide exactly the same.
func TestPropertyAlikeTriesSkippedDecideTheSame(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, later := genFragmenting(t)
		cfg := scheduler.Config{Policy: rapid.SampledFrom([]string{"gpuplane", "bestfit"}).Draw(t, "policy")}
		leaves := rapid.SliceOfN(rapid.Bool(), 64, 64).Draw(t, "leaves")
		run := func(repeat bool) []model.Decisions {
			defer scheduler.RepeatAlikeTries(repeat)()
			h, err := schedtest.NewHarness(snap, cfg)
			if err != nil {
				t.Fatal(err)
			}
			step := func() {
				h.Snap.Now += 10
				if _, err := h.Cycle(); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				step()
			}
			var keep []model.Allocation
			for k, a := range schedtest.Running(&h.Snap) {
				if !leaves[k%len(leaves)] {
					keep = append(keep, a)
				}
			}
			h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, keep...)
			h.Snap.Pending = append(h.Snap.Pending, later...)
			for range 8 {
				step()
			}
			for k := range h.Log {
				h.Log[k].Timings = nil
			}
			return h.Log
		}
		skipped, searched := run(false), run(true)
		for k := range searched {
			if !reflect.DeepEqual(skipped[k], searched[k]) {
				t.Fatalf("cycle %d decided\n%+v\nwithout the search made again, and\n%+v\nwith it", k, skipped[k], searched[k])
			}
		}
	})
}
