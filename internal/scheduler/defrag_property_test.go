package scheduler_test

import (
	"fmt"
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
// shrinking) make room for the gangs.
func genFragmenting(t *rapid.T) (model.Snapshot, []model.PodGroup) {
	snap := model.Snapshot{Nodes: schedtest.Cluster("n", rapid.IntRange(2, 5).Draw(t, "nodes"), 8, 64000, 1<<20),
		Budget: model.DisruptionBudget{MaxEvictions: rapid.SampledFrom([]int{-1, 4}).Draw(t, "budget")},
		Defrag: model.DefragPolicy{MaxMoves: rapid.SampledFrom([]int{1, 3, 100}).Draw(t, "moves"), Window: rapid.SampledFrom([]int64{1, 1000}).Draw(t, "window")}}
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

// Moves, shrinks, preemption and reclaim together keep every invariant
// and reach a fixed point on an unchanged workload, whatever the move
// budget: the argument of doc.go ("Why moves cannot loop").
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
		for i := 0; ; i++ {
			d := propertyStep(t, h)
			if len(d.Evictions) == 0 && len(d.Binds) == 0 && len(d.Holds) == 0 {
				break
			}
			if i > 60 {
				t.Fatalf("no fixed point after %d cycles: last %d binds, %d evictions, %d moves", i, len(d.Binds), len(d.Evictions), len(d.Moves))
			}
		}
	})
}
