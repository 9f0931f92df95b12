package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Draining. A pod that needs a whole node (it asks for as many GPUs as the
// largest node has) starts only when such a node is empty. Under load that
// rarely happens by itself: work that needs less keeps landing on whatever
// frees, and a move (defrag.go) empties a node only when everything on it
// may move. So, with DefragPolicy.DrainAfter set and moves on, a group
// with such pods that has waited DrainAfter since it was created, and
// whose queue admits it, has a node drained for each of them at the start
// of every cycle, before allocation: of the first maxDrainScan nodes it
// fits by the most GPUs free, those cheapest to empty, counting only the
// work there that may not move (the GPUs neither free nor held by movable
// groups), then the most GPUs free. The cycle keeps new work off those
// nodes (keepFree), including room that frees there later in the cycle,
// until it finishes, so the free GPUs of a drained node idle until its
// fixed work ends. Once nothing but movable groups stands on them, those
// groups are moved off, within the move window and the disruption budget,
// and the group is held in the room they leave, as a move for it would.
// Under DefragPolicy.MaxLostWork a movable group may move only within that
// long of its last checkpoint, and the groups on a node seldom all are at
// once: each is then moved off as soon as it is (moveAhead), the room it
// leaves kept with the node's, and the group is held once the last one
// moves. A drained node holds no decision: every cycle chooses again from
// the state, and the node that was drained, having taken nothing new and
// kept its free GPUs, is the cheapest again unless another became cheaper.
// While the group waits, its reason names the nodes kept for it and what
// stands on each (model.Unplaced.Kept), as this cycle chose them.

const (
	// maxDrains caps the groups one cycle drains nodes for, oldest first,
	// and maxDrainLooks the groups it tries to place or drain for (each
	// reads every node).
	maxDrains     = 2
	maxDrainLooks = 8
	// maxDrainScan caps the nodes one drain weighs: a cycle pays for at
	// most this many, not for every node of the cluster. A node being
	// drained keeps its free GPUs and so stays among the first.
	maxDrainScan = 64
)

// drain keeps new work off nodes for the groups that waited DrainAfter
// for whole nodes, places those that fit, and moves the movable work off
// a drained node once it is all that stands there.
func (c *cycle) drain() {
	pol := &c.snap.Defrag
	if pol.DrainAfter <= 0 || pol.MaxMoves <= 0 || pol.Window <= 0 {
		return
	}
	var waiting []*pending
	for _, qs := range c.queues {
		for _, p := range qs {
			if !p.placed && !p.out() && p.g.Topology == nil && c.snap.Now-p.g.CreatedAt >= pol.DrainAfter {
				waiting = append(waiting, p)
			}
		}
	}
	if len(waiting) == 0 {
		return
	}
	slices.SortFunc(waiting, func(a, b *pending) int {
		if x := cmp.Compare(a.g.CreatedAt, b.g.CreatedAt); x != 0 {
			return x
		}
		return cmp.Compare(a.g.Name, b.g.Name)
	})
	largest := 0
	for i := range c.s.nodes {
		largest = max(largest, len(c.s.nodes[i].GPUs))
	}
	drains, looks := 0, 0
	for _, p := range waiting {
		if drains == maxDrains || looks == maxDrainLooks {
			return
		}
		var req *model.Request
		count := 0
		for k := range p.g.Pods {
			if r := &p.g.Pods[k].Request; largest > 0 && r.GPUs >= largest && len(r.FirstOf) == 0 {
				req = r
				count++
			}
		}
		if count == 0 || !c.tree.Admits(p.q, p.admit) {
			continue
		}
		looks++
		if binds, ok := c.fits(p); ok && c.assign(p, binds) {
			// Its room is whole now: it starts before anything else
			// takes it.
			c.commit(p, binds)
			continue
		}
		cands := c.drainNodes(req, count)
		if cands == nil {
			continue
		}
		drains++
		if c.drainMoves(p, cands) {
			continue
		}
		kept := make([]model.KeptNode, len(cands))
		for k, cd := range cands {
			c.keepFree(cd.n)
			kept[k] = model.KeptNode{Node: c.s.nodes[cd.n].Name, Fixed: cd.fixed, Movable: cd.movable, Unsaved: cd.unsaved}
		}
		// What the group is told while it waits (finish).
		if c.kept == nil {
			c.kept = map[*pending][]model.KeptNode{}
		}
		c.kept[p] = kept
	}
}

// drainCand is a node a drain weighs: its index, the milli-GPU held there
// by work that may not move and by work that may (unsaved of it by groups
// past the policy's MaxLostWork from their restart point), and its free
// milli-GPU.
type drainCand struct {
	n                             int
	fixed, movable, unsaved, free int64
}

// drainNodes picks count nodes req fits, not drained yet in this cycle
// nor going away, among the first maxDrainScan such nodes by whole GPUs
// free (the scheduler's free index), cheapest to empty first: the fewest
// milli-GPU held by work that may not move (running groups that did not
// opt in or may not be evicted, and room held for waiting groups), then
// the most free, then by index. It returns nil when too few nodes fit.
func (c *cycle) drainNodes(req *model.Request, count int) []drainCand {
	st := c.s.st
	var cs []drainCand
	x := &c.s.free
	x.sync(st)
	x.each(func(n int) bool {
		node := &c.s.nodes[n]
		if c.drained[n] || node.Disrupted || len(node.GPUs) != req.GPUs || !placement.StaticFits(node, req) {
			return true
		}
		free := x.milli[n]
		var movable, unsaved int64
		for _, ps := range c.s.run.onNode[n] {
			if g := ps.g; g.movable && !g.nonPreemptible && g.queue != nil {
				m := ps.a.Request.UsageOn(ps.a.GPUs).GPUMilli
				movable += m
				if !c.fresh(g) {
					unsaved += m
				}
			}
		}
		fixed := int64(len(node.GPUs))*model.MilliPerGPU - free - movable
		cs = append(cs, drainCand{n: n, fixed: max(fixed, 0), movable: movable, unsaved: unsaved, free: free})
		return len(cs) < maxDrainScan
	})
	if len(cs) < count {
		return nil
	}
	slices.SortFunc(cs, func(a, b drainCand) int {
		if x := cmp.Compare(a.fixed, b.fixed); x != 0 {
			return x
		}
		if x := cmp.Compare(b.free, a.free); x != 0 {
			return x
		}
		return cmp.Compare(a.n, b.n)
	})
	return cs[:count]
}

// drainMoves moves the movable groups off the drained nodes (cands) when
// they are all that stands there and p then fits, within the moves left
// and the disruption budget: each placed off every drained node and off
// the nodes it ran on, the moves p can do without put back, p held in the
// room they leave (commitMoves). It reports whether it did; otherwise the
// state is as it was, or as moveAhead left it.
func (c *cycle) drainMoves(p *pending, cands []drainCand) bool {
	if c.s.run.movable == 0 || c.budget == 0 {
		return false
	}
	recent := c.movedRecently()
	var groups, unsaved []*runningGroup
	seen := map[*runningGroup]bool{}
	for _, cd := range cands {
		for _, ps := range c.s.run.onNode[cd.n] {
			g := ps.g
			if seen[g] {
				continue
			}
			seen[g] = true
			switch {
			case !c.mayMove(g, recent):
				return false // something here may not move now
			case c.fresh(g):
				groups = append(groups, g)
			default:
				unsaved = append(unsaved, g)
			}
		}
	}
	if len(groups) == 0 {
		return false
	}
	slices.SortFunc(groups, func(a, b *runningGroup) int {
		if x := cmp.Compare(a.use.GPUMilli, b.use.GPUMilli); x != 0 {
			return x
		}
		return cmp.Compare(a.name, b.name)
	})
	if len(unsaved) > 0 {
		c.moveAhead(p, cands, groups)
		return false
	}
	if len(groups) > c.movesLeft() {
		return false
	}
	pods := 0
	for _, g := range groups {
		pods += len(g.members)
	}
	if c.budget >= 0 && pods > c.budget {
		return false
	}
	st := c.s.st
	mark := st.Checkpoint()
	avoid := c.drainAvoid(cands)
	moves := make([]moved, 0, len(groups))
	for _, rg := range groups {
		m, ok := c.moveOff(rg, avoid)
		if !ok {
			st.Rollback(mark)
			return false
		}
		moves = append(moves, m)
	}
	binds, ok := c.fits(p)
	if !ok || !c.commitMoves(p, binds, moves) {
		st.Rollback(mark)
		return false
	}
	for _, cd := range cands {
		c.drained[cd.n] = true
	}
	return true
}

// moveAhead moves off the drained nodes (cands) the groups there within
// the policy's MaxLostWork of their restart point (groups, smallest
// first), while others there may move only once they checkpoint: each
// group would lose more the longer it waited for the rest, and a drain
// waiting for all of them to checkpoint at once might wait for good. It
// moves as many as the moves left and the disruption budget allow, each
// placed as drainMoves places it or left where it runs, and lowers the
// movable milli-GPU of cands by what they held there. p is not placed:
// the room they leave is kept for it with the rest of the node.
func (c *cycle) moveAhead(p *pending, cands []drainCand, groups []*runningGroup) {
	st := c.s.st
	avoid := c.drainAvoid(cands)
	left := c.movesLeft()
	var moves []moved
	pods := 0
	for _, rg := range groups {
		if len(moves) == left || (c.budget >= 0 && pods+len(rg.members) > c.budget) {
			break
		}
		mark := st.Checkpoint()
		m, ok := c.moveOff(rg, avoid)
		if !ok {
			st.Rollback(mark)
			continue
		}
		moves = append(moves, m)
		pods += len(rg.members)
	}
	if len(moves) == 0 {
		return
	}
	c.recordMoves(p, moves)
	for _, m := range moves {
		for _, ps := range m.rg.members {
			for k := range cands {
				if cands[k].n == ps.node {
					cands[k].movable -= ps.a.Request.UsageOn(ps.a.GPUs).GPUMilli
				}
			}
		}
	}
}

// drainAvoid is the nodes a group moved off drained nodes may not go to:
// every node drained in this cycle so far and cands.
func (c *cycle) drainAvoid(cands []drainCand) map[int]bool {
	if c.drained == nil {
		c.drained = map[int]bool{}
	}
	avoid := map[int]bool{}
	for n := range c.drained {
		avoid[n] = true
	}
	for _, cd := range cands {
		avoid[cd.n] = true
	}
	return avoid
}

// moveOff releases rg and places it again off avoid and off the nodes it
// ran on (added to avoid). On false the caller rolls the state back.
func (c *cycle) moveOff(rg *runningGroup, avoid map[int]bool) (moved, bool) {
	for _, ps := range rg.members {
		avoid[ps.node] = true
	}
	mp := c.movedForm(rg)
	c.release(rg)
	mb, ok := c.placeOff(mp, avoid)
	return moved{rg: rg, mp: mp, binds: mb}, ok
}

// keepFree keeps node n free for the rest of the cycle: it takes the
// node's free room out of the state, its CPU, memory and every GPU's free
// part, as a hold's room is taken, so that the free index and what
// counts free room see none, and closes the node to placement
// (placement.State.Close), so that room an eviction or a move frees
// there later in the cycle stays kept too. finish gives the room back
// and opens the node.
func (c *cycle) keepFree(n int) {
	if c.drained == nil {
		c.drained = map[int]bool{}
	}
	c.drained[n] = true
	ns := &c.s.st.Nodes[n]
	t := taken{node: n, req: model.Request{MilliCPU: ns.FreeCPU, MemoryMiB: ns.FreeMem}}
	for g := range ns.GPUFree {
		if ns.GPUFree[g] <= 0 {
			continue
		}
		sh := model.GPUShare{Index: g, Milli: ns.GPUFree[g], MIGSlices: ns.SliceFree[g]}
		if ns.Node.GPUs[g].MemoryMiB > 0 {
			sh.MemoryMiB = ns.GPUMem[g]
		}
		t.shares = append(t.shares, sh)
	}
	if c.s.st.Assign(n, &t.req, t.shares) == nil {
		c.held = append(c.held, t)
	}
	c.s.st.Close(n)
}

// keptLimit bounds the kept nodes one reason names.
const keptLimit = 4

// keptReason says which nodes are kept free for a group and what it waits
// for on each: the work there that may not move to end, then the movable
// work to be moved off, and of that what waits for a checkpoint first.
func keptReason(kept []model.KeptNode) string {
	var b strings.Builder
	for k, n := range kept {
		if k == keptLimit {
			fmt.Fprintf(&b, "; and %d more nodes are kept free for it", len(kept)-k)
			break
		}
		if k > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "node %s is kept free for it: ", n.Node)
		switch {
		case n.Fixed > 0 && n.Movable > 0:
			fmt.Fprintf(&b, "it waits for the pods there that may not move (%s) to end, then the movable ones (%s) are moved off", gpuWords(n.Fixed), gpuWords(n.Movable))
		case n.Fixed > 0:
			fmt.Fprintf(&b, "it waits for the pods there that may not move (%s) to end", gpuWords(n.Fixed))
		case n.Movable > 0:
			fmt.Fprintf(&b, "it waits for the movable pods there (%s) to be moved off", gpuWords(n.Movable))
		default:
			b.WriteString("no pod there holds a GPU")
		}
		if n.Unsaved > 0 {
			fmt.Fprintf(&b, ", %s of them once they checkpoint", gpuWords(n.Unsaved))
		}
	}
	return b.String()
}

// gpuWords is milli-GPU in words: "1 GPU", "2.5 GPUs".
func gpuWords(milli int64) string {
	if milli == model.MilliPerGPU {
		return "1 GPU"
	}
	return gpuNumber(milli) + " GPUs"
}
