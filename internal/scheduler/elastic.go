package scheduler

import (
	"cmp"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Elastic groups. A group declares a gang size (MinMember) below the pods
// it has: it starts once MinMember of them fit and the rest join as room
// appears (place takes every pod that fits, and PodGroup.Min asks a partly
// running group for one more at a time), up to all its pods, the most it
// runs. When preemption or reclaim would evict it, it first gives up the
// members above MinMember (shrink): tryShrink runs before the whole-group
// search and takes only such members, so a group shrinks toward its
// minimum before any group is evicted whole for the same preemptor. The
// members given up wait again in their group and rejoin as room appears.

// surplus is how many members rg may give up and still run: those above
// its declared gang size; 0 for a group that runs only whole.
func (rg *runningGroup) surplus() int {
	if rg.minMember <= 0 {
		return 0
	}
	return max(0, len(rg.members)-rg.minMember)
}

// shrinkOrder is the members rg gives up first: those on nodes the
// pending group could use at all; for a pending group that needs GPUs,
// those holding GPUs (a Ray head or a launcher without GPUs stays, as
// long as workers can go); then the highest pod name (the last rank,
// which elastic launchers drop first).
func (c *cycle) shrinkOrder(p *pending, rg *runningGroup) []*podState {
	gpus := p.demand.GPUMilli > 0
	out := slices.Clone(rg.members)
	slices.SortFunc(out, func(x, y *podState) int {
		if fx, fy := c.feasible.fits(x.node), c.feasible.fits(y.node); fx != fy {
			if fx {
				return -1
			}
			return 1
		}
		if gx, gy := len(x.a.GPUs) > 0, len(y.a.GPUs) > 0; gpus && gx != gy {
			if gx {
				return -1
			}
			return 1
		}
		return cmp.Compare(y.a.Pod, x.a.Pod)
	})
	return out
}

// allowedPart reports whether p may take use, part of rg, under m with the
// queues' usage as it is now: allowed, for a part of the group.
func (c *cycle) allowedPart(p *pending, rg *runningGroup, use model.Resources, m evictMode) bool {
	if rg.evicted == c.epoch || rg.nonPreemptible {
		return false
	}
	q := rg.queue.q
	switch m {
	case preempt:
		return q == p.q && rg.priority < p.g.Priority
	case reclaimFair:
		return !c.tree.Related(q, p.q) && c.tree.KeepsFairShare(q, use)
	default:
		return !c.tree.Related(q, p.q) && c.tree.KeepsGuarantee(q, use)
	}
}

// shrinkCandidates returns the groups that could shrink for p under m, in
// the order victims takes groups: from the queue furthest above its fair
// share (reclaimFair) or guarantee (reclaimGuarantee), then the cheapest.
// They are the preemptible groups with members above their minimum on a
// node p could use, of the queues victims reads; allowedPart then checks
// each member taken, since a queue may give up part of a group where it
// could not give all of it.
func (c *cycle) shrinkCandidates(p *pending, m evictMode) []*runningGroup {
	type keyed struct {
		rg  *runningGroup
		key float64
	}
	var out []keyed
	c.feasible.reset(c.s.st, p.g)
	add := func(q int, key float64) {
		for _, e := range c.leaves[q] {
			for _, rg := range e.elastic {
				if rg.surplus() > 0 && !rg.nonPreemptible && rg.evicted != c.epoch && !c.young(rg) && (m != preempt || rg.priority < p.g.Priority) && c.useful(rg) {
					out = append(out, keyed{rg, key})
				}
			}
		}
	}
	if m == preempt {
		add(p.q, 0)
	} else {
		for q := range c.leaves {
			if len(c.leaves[q]) == 0 || c.tree.Related(q, p.q) {
				continue
			}
			switch {
			case m == reclaimFair && c.tree.AboveFairShare(q):
				add(q, c.tree.Over(q, model.Resources{}))
			case m == reclaimGuarantee && c.tree.IsLeaf(q) && c.tree.BorrowedGPU(q) > 0:
				add(q, float64(c.tree.BorrowedGPU(q)))
			}
		}
	}
	slices.SortFunc(out, func(a, b keyed) int {
		if x := cmp.Compare(b.key, a.key); x != 0 {
			return x
		}
		return c.order.compare(a.rg, b.rg)
	})
	groups := make([]*runningGroup, len(out))
	for k := range out {
		groups[k] = out[k].rg
	}
	return groups
}

// lose notes that n members of rg are evicted in this cycle. When rg's
// pending part counts them toward its gang and is not placed yet, it now
// needs that many more of its own pods placed with it, or, when it has
// too few waiting, it waits for them (missing) and starts whole in a later
// cycle: a plan sized on members that are leaving would start the gang,
// or hold room for it, below its minimum.
func (c *cycle) lose(rg *runningGroup, n int) {
	if rg.partAt != c.epoch {
		return
	}
	p := rg.part
	p.lost += n
	if p.placed || p.out() {
		return
	}
	if need := p.g.MinMember - (p.g.Placed - p.lost); need > len(p.g.Pods) {
		p.missing = need - len(p.g.Pods)
		c.tree.AddDemand(p.q, model.Resources{}.Sub(p.demand))
	} else if p.topo != nil {
		p.topo.need = p.min()
	}
}

// grow notes that p is placed, or holds room, in this cycle: its running
// members, which its plan counts toward its gang, are not evicted whole
// in it (allowed).
func (c *cycle) grow(p *pending) {
	if p.rg != nil {
		p.rg.grown = c.epoch
	}
}

// shrunk is one member an elastic group gives up.
type shrunk struct {
	rg *runningGroup
	ps *podState
}

// tryShrink places p by evicting only members elastic groups can give up
// (surplus) among p's victims under m, in the victims' order, one member
// at a time until p fits; it then gives back, the last taken first, every
// member p can do without, and commits the evictions (Eviction.Shrink)
// and p's hold as tryEvict does. It reports whether p was placed; when it
// was not, the state is as it was.
func (c *cycle) tryShrink(p *pending, m evictMode) bool {
	cands := c.shrinkCandidates(p, m)
	if len(cands) == 0 {
		return false
	}
	st := c.s.st
	mark := st.Checkpoint()
	var taken []shrunk
	var binds []model.Bind
	groups := 0
search:
	for _, v := range cands {
		if groups == maxVictims {
			break
		}
		n := v.surplus()
		groups++
		for _, ps := range c.shrinkOrder(p, v) {
			if n == 0 || !c.feasible.fits(ps.node) {
				break // the rest are on nodes p cannot use: freeing them gives p nothing
			}
			use := ps.a.Usage()
			if !c.allowedPart(p, v, use, m) {
				break
			}
			if c.budget >= 0 && len(taken)+1 > c.budget {
				break search
			}
			st.Release(ps.node, &ps.a.Request, ps.a.GPUs)
			c.tree.AddUsage(v.queue.q, model.Resources{}.Sub(use))
			taken = append(taken, shrunk{v, ps})
			n--
			if b, ok := c.fits(p); ok {
				binds = b
				break search
			}
		}
	}
	undo := func() {
		for _, t := range taken {
			c.tree.AddUsage(t.rg.queue.q, t.ps.a.Usage())
		}
		st.Rollback(mark)
	}
	if binds == nil {
		undo()
		return false
	}
	// Reprieve: the last member taken made p fit; earlier ones may not be
	// needed with it gone.
	kept := make([]bool, len(taken))
	for k := len(taken) - 2; k >= 0; k-- {
		t := taken[k]
		back := st.Checkpoint()
		if st.Hold(t.ps.node, &t.ps.a.Request, t.ps.a.GPUs) != nil {
			st.Rollback(back)
			continue
		}
		c.tree.AddUsage(t.rg.queue.q, t.ps.a.Usage())
		if b, ok := c.fits(p); ok {
			binds, kept[k] = b, true
			continue
		}
		c.tree.AddUsage(t.rg.queue.q, model.Resources{}.Sub(t.ps.a.Usage()))
		st.Rollback(back)
	}
	if !c.assign(p, binds) {
		for k, t := range taken {
			if !kept[k] {
				c.tree.AddUsage(t.rg.queue.q, t.ps.a.Usage())
			}
		}
		st.Rollback(mark)
		return false
	}
	var victimPods []string
	for k, t := range taken {
		if kept[k] {
			continue
		}
		// A group shrunk in this cycle is neither shrunk nor evicted again
		// in it: its members here are still the ones it had.
		t.rg.evicted = c.epoch
		c.lose(t.rg, 1)
		c.keepVacated([]*podState{t.ps})
		a := t.ps.a
		c.d.Evictions = append(c.d.Evictions, model.Eviction{Pod: a.Pod, Group: a.Group, Node: a.Node, For: p.g.Name, Reason: m.reason(), Shrink: true})
		victimPods = append(victimPods, a.Pod)
	}
	if c.budget > 0 {
		c.budget -= len(victimPods)
	}
	c.startHold(p, binds, victimPods)
	return true
}
