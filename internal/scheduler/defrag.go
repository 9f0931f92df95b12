package scheduler

import (
	"cmp"
	"math/bits"
	"reflect"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Defragmentation. After preemption and reclaim, a group still pending
// whose queue admits it, and whose GPUs are free in total on the nodes it
// could use but not where one placement can take them (on no node, or in
// no domain of its required topology level), may have running Movable
// groups moved out of its way: each moved group is evicted and placed
// elsewhere in the same plan, held there (Hold.Moved) until its pods
// start again, and the waiting group is held in the room they leave. A
// move is made only when the waiting group then fits, moves nothing it
// can do without, and never leaves a moved group unplaced; Snapshot.Defrag
// bounds the moves per window, and a group moved within the window is not
// moved again. doc.go says why moves cannot loop.

const (
	// maxDefragTries caps the waiting groups one cycle tries to make room
	// for by moves, and maxDefragLooks the groups it looks at: each look
	// reads every node the group could use, and a try is a look that
	// found the group's GPUs free in total but scattered. A group with
	// too few GPUs free for it anywhere uses no try, so that the groups
	// that wait only for scattered GPUs are reached behind it.
	maxDefragTries = 4
	maxDefragLooks = 32
	// maxMovesPerGroup caps the groups moved for one waiting group.
	maxMovesPerGroup = 8
)

// moved is one group moved in a try: where it goes, and the pending form
// it was placed as.
type moved struct {
	rg    *runningGroup
	mp    *pending
	binds []model.Bind
}

// defragment tries moves for the groups still pending, queue by queue in
// their order, within the snapshot's DefragPolicy and the disruption
// budget. A group alike the last one whose try searched and moved nothing
// counts as tried without a search of its own: it would fail the same
// way, and a backlog of identical whole-node pods pays for one search, not
// for one each.
func (c *cycle) defragment() {
	left := c.movesLeft()
	if left == 0 || c.budget == 0 || c.s.run.movable == 0 {
		return
	}
	// The index follows the state every cycle moves may run, so that a
	// cycle with a group to make room for reads only what changed.
	c.s.free.sync(c.s.st)
	var recent map[string]bool
	var last *model.PodGroup // the group the node filter was last reset for
	// failed is the last group whose try searched and moved nothing, while
	// nothing has moved since and every group looked at since asked what
	// it asks (alike).
	var failed *pending
	tries, looks := 0, 0
	for _, qs := range c.queues {
		for _, p := range qs {
			if left == 0 || c.budget == 0 || tries == maxDefragTries || looks == maxDefragLooks {
				return
			}
			if p.placed || p.out() || !c.tree.Admits(p.q, p.admit) {
				continue
			}
			least := leastNeed(p.g)
			if least.GPUMilli == 0 {
				continue // a group without GPUs waits for CPU or memory, not for scattered GPUs
			}
			if recent == nil {
				recent = c.movedRecently()
			}
			looks++
			if last == nil || !sameRequests(last, p.g) {
				c.feasible.reset(c.s.st, p.g)
				last, failed = p.g, nil
			}
			if failed != nil && !repeatAlike && alike(failed, p) {
				tries++ // its try would repeat failed's, move for move
				continue
			}
			n, tried := c.tryMove(p, least.GPUMilli, min(left, maxMovesPerGroup), recent)
			left -= n
			if tried {
				tries++
			}
			failed = nil
			if tried && n == 0 {
				failed = p
			}
		}
	}
}

// movesLeft is how many moves the policy allows in the rest of this
// cycle: those of its window less the moves the cycle made (drains move
// before defragment does).
func (c *cycle) movesLeft() int {
	return max(c.snap.Defrag.Left(c.snap.Now)-len(c.d.Moves), 0)
}

// movedRecently is the set of groups canMove keeps in place for their
// name, made once a cycle: groups moved within the window stay, and so do
// groups with pods pending, which are growing where they run. The moves
// of this cycle are added as they are made.
func (c *cycle) movedRecently() map[string]bool {
	if c.recent != nil {
		return c.recent
	}
	c.recent = make(map[string]bool, len(c.snap.Defrag.Recent)+len(c.snap.Pending))
	for _, m := range c.snap.Defrag.Recent {
		if c.snap.Now-m.At < c.snap.Defrag.Window {
			c.recent[m.Group] = true
		}
	}
	for i := range c.snap.Pending {
		c.recent[c.snap.Pending[i].Name] = true
	}
	return c.recent
}

// canMove reports whether rg may be moved in this cycle: all its members
// opted in, it may be evicted at all, it was not touched in this cycle nor
// moved within the window, it is past its minimum runtime, none of its
// pods waits (recent holds both), it is a named group (its pods wait again
// under its name), none of its pods holds devices through claims or
// volumes, which stay where they were allocated, and it is within the
// policy's MaxLostWork of its restart point.
func (c *cycle) canMove(rg *runningGroup, recent map[string]bool) bool {
	return c.mayMove(rg, recent) && c.fresh(rg)
}

// mayMove is canMove without the bound on the work lost: whether rg may
// be moved in this cycle once it is within MaxLostWork of its restart
// point.
func (c *cycle) mayMove(rg *runningGroup, recent map[string]bool) bool {
	return rg.movable && !rg.nonPreemptible && rg.evicted != c.epoch && !recent[rg.name] && rg.queue != nil && !c.young(rg)
}

// fresh reports whether moving rg now throws away at most the policy's
// MaxLostWork of its work: its restart point (last checkpoint, or start)
// is that recent, or the policy sets no bound.
func (c *cycle) fresh(rg *runningGroup) bool {
	return c.snap.Defrag.MaxLostWork <= 0 || c.snap.Now-rg.restart <= c.snap.Defrag.MaxLostWork
}

// tryMove moves up to most Movable groups so that p fits, and returns how
// many it moved and whether it searched for moves at all (false when the
// nodes p could use hold too few free GPUs in all, or nothing movable);
// c.feasible is set for p. When the free GPUs of the nodes p could use
// together fall short of need there is nothing to gather. Otherwise it
// clears the nodes with the most free GPUs first, each of its movable
// groups (the smallest first) placed elsewhere, off every node being
// cleared, until p fits; then it puts back every move p can do without,
// the first made first. It commits the moves and p's hold, or leaves the
// state as it was.
//
// The nodes are read in the order of the scheduler's free index (most
// whole GPUs free, then by index) as the state stood when tryMove began,
// and only as far as the search goes: the free GPUs are summed until they
// reach need, and the nodes p cannot use or that hold nothing movable are
// passed over as they are met. A try costs the nodes it looks at, not
// every node of the cluster.
func (c *cycle) tryMove(p *pending, need int64, most int, recent map[string]bool) (int, bool) {
	st := c.s.st
	x := &c.s.free
	x.sync(st)
	if !c.enough(x, need) {
		return 0, false
	}
	mark := st.Checkpoint()
	avoid := map[int]bool{}
	seen := map[*runningGroup]bool{}
	var moves []moved
	var binds []model.Bind
	pods := 0
	var here []*runningGroup
	searched := false // a node p could use holds something movable
	x.each(func(n int) bool {
		if !c.feasible.fits(n) {
			return true
		}
		here = here[:0]
		movable := false
		for _, ps := range c.s.run.onNode[n] {
			if g := ps.g; c.canMove(g, recent) {
				movable = true
				if !seen[g] {
					seen[g] = true
					here = append(here, g)
				}
			}
		}
		if !movable {
			return true // nothing here can make room
		}
		searched = true
		avoid[n] = true
		slices.SortFunc(here, func(a, b *runningGroup) int {
			if x := cmp.Compare(a.use.GPUMilli, b.use.GPUMilli); x != 0 {
				return x
			}
			return cmp.Compare(a.name, b.name)
		})
		for _, rg := range here {
			if len(moves) == most || (c.budget >= 0 && pods+len(rg.members) > c.budget) {
				return false
			}
			for _, ps := range rg.members {
				avoid[ps.node] = true
			}
			at := st.Checkpoint()
			mp := c.movedForm(rg)
			c.release(rg)
			mb, ok := c.placeOff(mp, avoid)
			if !ok {
				st.Rollback(at)
				continue
			}
			moves = append(moves, moved{rg: rg, mp: mp, binds: mb})
			pods += len(rg.members)
			if b, ok := c.fits(p); ok {
				binds = b
				return false
			}
		}
		return true
	})
	if binds == nil {
		st.Rollback(mark)
		return 0, searched
	}
	if !c.commitMoves(p, binds, moves) {
		st.Rollback(mark)
		return 0, true
	}
	return len(moves), true
}

// commitMoves puts back the moves p can do without (spareMoves), assigns
// p's binds, records every move left (its group's evictions, its hold
// where it goes, the Move) and holds p in the room they leave. On false
// (p's binds no longer assign) it has decided nothing, and the caller
// rolls the state back. The moves counted are then len(c.d.Moves).
func (c *cycle) commitMoves(p *pending, binds []model.Bind, moves []moved) bool {
	binds, moves = c.spareMoves(p, binds, moves)
	if !c.assign(p, binds) {
		return false
	}
	c.startHold(p, binds, c.recordMoves(p, moves))
	return true
}

// recordMoves writes moves made for p into the decisions: each moved
// group's pods evicted, the group held where it goes, the move counted
// against the window and the disruption budget. It returns the pods
// evicted.
func (c *cycle) recordMoves(p *pending, moves []moved) []string {
	recent := c.movedRecently()
	var victims []string
	for _, m := range moves {
		m.rg.evicted = c.epoch
		c.lose(m.rg, len(m.rg.members))
		members := m.rg.byNodeAndName()
		c.keepVacated(members)
		var own []string
		for _, ps := range members {
			a := ps.a
			c.d.Evictions = append(c.d.Evictions, model.Eviction{Pod: a.Pod, Group: a.Group, Node: a.Node, For: p.g.Name, Reason: model.EvictDefragment})
			own = append(own, a.Pod)
		}
		victims = append(victims, own...)
		for _, b := range m.binds {
			c.held = append(c.held, taken{node: b.NodeIndex, req: *podOf(m.mp, b.Pod).Request.Alt(b.Alternative), shares: b.GPUs})
		}
		c.d.Holds = append(c.d.Holds, model.Hold{Group: m.rg.name, Plan: m.binds, Victims: own, Since: c.snap.Now, Moved: true})
		c.d.Moves = append(c.d.Moves, model.Move{Group: m.rg.name, For: p.g.Name, At: c.snap.Now, Pods: len(own), GPUMilli: m.rg.use.GPUMilli})
		recent[m.rg.name] = true
	}
	if c.budget > 0 {
		c.budget -= len(victims)
	}
	return victims
}

// enough reports whether the nodes c.feasible's group could use have need
// milli-GPU free in all. It sums them from the most free down and stops
// as soon as they reach need; a shortfall, which took every node to find,
// is kept (c.short) for the next group with the same filter until the
// state changes.
func (c *cycle) enough(x *freeIndex, need int64) bool {
	if c.short.g == c.feasible.g && c.short.pos == x.pos {
		return c.short.total >= need
	}
	var total int64
	x.each(func(i int) bool {
		if c.feasible.fits(i) {
			total += x.milli[i]
		}
		return total < need
	})
	if total < need {
		c.short = shortfall{g: c.feasible.g, pos: x.pos, total: total}
		return false
	}
	return true
}

// shortfall is what a whole look found free for a filter's group, as of a
// position of the state's change log.
type shortfall struct {
	g     *model.PodGroup
	pos   int
	total int64
}

// freeIndex keeps the nodes by whole GPUs free (non-MIG), for moves to
// clear the emptiest first without sorting, or even reading, every node
// in each cycle. It is brought up to date from the state's change log
// (placement.State.Changes), so a cycle pays for the nodes that changed;
// it is built again for a new state.
type freeIndex struct {
	st    *placement.State
	pos   int
	milli []int64 // per node: milli-GPU free
	whole []int32 // per node: whole GPUs free, milli / MilliPerGPU
	// sets[k] has bit i set when node i has k whole GPUs free.
	sets [][]uint64
}

// sync brings x up to date with st.
func (x *freeIndex) sync(st *placement.State) {
	if x.st != st || len(x.milli) != len(st.Nodes) {
		n := len(st.Nodes)
		x.st, x.milli, x.whole = st, make([]int64, n), make([]int32, n)
		x.sets = x.sets[:0]
		for i := range n {
			x.whole[i] = -1
			x.set(i)
		}
		_, x.pos = st.Changes(0)
		return
	}
	changed, pos := st.Changes(x.pos)
	if len(changed) > len(x.milli) {
		// The log repeats nodes (a search assigns and rolls back): each
		// is read once.
		for i := range x.milli {
			x.set(i)
		}
	} else {
		for _, i := range changed {
			x.set(i)
		}
	}
	x.pos = pos
}

// set reads node i's free GPUs again and files it under them.
func (x *freeIndex) set(i int) {
	free := x.st.Nodes[i].FreeMilli()
	k := int32(free / model.MilliPerGPU)
	x.milli[i] = free
	if k == x.whole[i] {
		return
	}
	words := (len(x.milli) + 63) / 64
	if old := x.whole[i]; old >= 0 {
		x.sets[old][i/64] &^= 1 << (i % 64)
	}
	for int(k) >= len(x.sets) {
		x.sets = append(x.sets, make([]uint64, words))
	}
	x.sets[k][i/64] |= 1 << (i % 64)
	x.whole[i] = k
}

// each calls f for every node, the most whole GPUs free first, then by
// index, while f returns true.
func (x *freeIndex) each(f func(i int) bool) {
	for k := len(x.sets) - 1; k >= 0; k-- {
		for w, word := range x.sets[k] {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &= word - 1
				if !f(w*64 + b) {
					return
				}
			}
		}
	}
}

// placeOff places every pod of a moved group as place does, but off the
// nodes in avoid: a pod whose best node is among them takes the best of
// the others (Placer.PlaceExcept). It reports the binds, the pods assigned
// to the state, or false with whatever it assigned left for the caller to
// roll back.
func (c *cycle) placeOff(mp *pending, avoid map[int]bool) ([]model.Bind, bool) {
	st := c.s.st
	binds := make([]model.Bind, 0, len(mp.g.Pods))
	for k := range mp.g.Pods {
		pod := &mp.g.Pods[k]
		o, ok := c.s.placer.Place(&pod.Request)
		if ok && avoid[o.Node] {
			o, ok = c.s.placer.PlaceExcept(&pod.Request, avoid)
		}
		if !ok || st.Assign(o.Node, &pod.Request, o.Shares) != nil {
			return nil, false
		}
		binds = append(binds, model.Bind{Pod: pod.Name, Group: mp.g.Name, Node: c.s.nodes[o.Node].Name, NodeIndex: o.Node, GPUs: o.Shares, Volumes: st.LastVolumes()})
	}
	return binds, true
}

// sameRequests reports whether a and b ask for the same pods' requests,
// in order: the node filter's answers for one hold for the other.
func sameRequests(a, b *model.PodGroup) bool {
	if len(a.Pods) != len(b.Pods) {
		return false
	}
	for k := range a.Pods {
		if !reflect.DeepEqual(&a.Pods[k].Request, &b.Pods[k].Request) {
			return false
		}
	}
	return true
}

// repeatAlike, set only by tests, makes defragment search again for a
// group alike the last one that failed, to show that not searching
// decides nothing differently.
var repeatAlike bool

// alike reports whether a try for q, made right after one for p that
// searched and moved nothing, would repeat p's move for move and fail as
// well, given that q's pods ask what p's ask (sameRequests, which
// defragment has compared for its node filter: the nodes a try may use,
// what it needs, where it places). The state, the moves left, the budget
// and the groups kept in place are as p's try found them (it rolled back),
// so what else the try reads of the group must be the same: its queue and
// what it must admit (admission) and its minimum, with no topology (whose
// placement reads the group's slices).
func alike(p, q *pending) bool {
	return p.q == q.q && p.admit == q.admit && p.g.Topology == nil && q.g.Topology == nil && p.min() == q.min()
}

// movedForm is rg as a pending group to place elsewhere: all its running
// pods, with their requests, in node and name order.
func (c *cycle) movedForm(rg *runningGroup) *pending {
	members := rg.byNodeAndName()
	g := &model.PodGroup{Name: rg.name, Queue: rg.queue.name, Priority: rg.priority, MinMember: len(members), Movable: true,
		NonPreemptible: rg.nonPreemptible, Pods: make([]model.Pod, len(members))}
	for k, ps := range members {
		g.Pods[k] = model.Pod{Name: ps.a.Pod, Request: ps.a.Request, Slice: ps.a.Slice}
	}
	return &pending{g: g, q: rg.queue.q}
}

// spareMoves puts back, the first made first, each move without which p
// still fits: its group released from where it was to go and assigned
// again where it ran. It returns p's binds with the moves left, which the
// state then holds.
func (c *cycle) spareMoves(p *pending, binds []model.Bind, moves []moved) ([]model.Bind, []moved) {
	st := c.s.st
	kept := moves[:0:0]
	for k, m := range moves {
		if k == len(moves)-1 {
			kept = append(kept, m) // the last move made p fit
			break
		}
		at := st.Checkpoint()
		for _, b := range m.binds {
			st.Release(b.NodeIndex, podOf(m.mp, b.Pod).Request.Alt(b.Alternative), b.GPUs)
		}
		if c.restore(m.rg) {
			if b, ok := c.fits(p); ok {
				binds = b
				continue
			}
		}
		st.Rollback(at)
		kept = append(kept, m)
	}
	return binds, kept
}

// keepMoved carries a moved group's hold while the group has no pod
// pending (its old pods are still exiting, or not yet made again): it
// keeps, for this cycle, the room of its plan that is free, read from its
// old pods' requests while they run, and returns the hold again with the
// pods left. A hold past HoldTimeout ends.
func (c *cycle) keepMoved(h *model.Hold) {
	if c.snap.HoldTimeout > 0 && c.snap.Now-h.Since >= c.snap.HoldTimeout {
		return
	}
	var left []string
	g := &model.PodGroup{Name: h.Group}
	for _, v := range h.Victims {
		ps := c.s.run.pods[v]
		if ps == nil {
			continue
		}
		left = append(left, v)
		g.Pods = append(g.Pods, model.Pod{Name: v, Request: ps.a.Request})
	}
	plan := make([]model.Bind, 0, len(h.Plan))
	for _, b := range h.Plan {
		i, ok := c.s.index[b.Node]
		if !ok {
			return
		}
		b.NodeIndex = i
		plan = append(plan, b)
	}
	if len(g.Pods) == len(plan) {
		// Every pod of the plan still runs where it was: the free part of
		// its new place is kept for it.
		ok := true
		for _, b := range plan {
			if !slices.ContainsFunc(g.Pods, func(pod model.Pod) bool { return pod.Name == b.Pod }) {
				ok = false
			}
		}
		if ok {
			c.reserve(&pending{g: g}, plan)
		}
	}
	c.d.Holds = append(c.d.Holds, model.Hold{Group: h.Group, Plan: plan, Victims: left, Since: h.Since, Moved: true})
}
