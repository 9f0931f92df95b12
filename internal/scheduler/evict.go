package scheduler

import (
	"cmp"
	"container/heap"
	"math"
	"reflect"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// maxVictims caps the victim groups one pending group may take in a cycle.
const maxVictims = 64

// evictMode says which running groups a pending group may evict.
type evictMode int

const (
	// preempt: preemptible groups of the pending group's own queue with a
	// strictly lower priority.
	preempt evictMode = iota
	// reclaimFair: groups of queues outside the pending group's branch
	// that stay at or above their fair share (doc.go).
	reclaimFair
	// reclaimGuarantee: groups of leaf queues outside the pending group's
	// branch that stay at or above their GPU guarantee, for a leaf queue
	// that stays within its own (doc.go).
	reclaimGuarantee
)

// reason is the Eviction.Reason of the mode.
func (m evictMode) reason() string {
	if m == preempt {
		return "preempt"
	}
	return "reclaim"
}

// evictFor runs preempt (across false) or reclaim (across true) for every
// group still pending that the room of pods being deleted does not hold
// (waitExiting). Reclaim tries the fair-share rule first and the
// guarantee rule only for a group the first one did not place.
func (c *cycle) evictFor(across bool) {
	for q, qs := range c.queues {
		for _, p := range qs {
			if p.placed || p.out() || c.waitExiting(p) || c.budget == 0 {
				continue
			}
			c.youngAt = math.MaxInt64
			if !c.evictOne(p, q, across, false) && c.youngAt != math.MaxInt64 {
				c.pastMinRuntime(p, q, across) // minruntime.go
			}
		}
	}
}

// evictOne runs p's evictions of one kind; with forbidden it only finds
// out whether they would place p (tryEvict). It reports whether p was
// placed.
func (c *cycle) evictOne(p *pending, q int, across, forbidden bool) bool {
	spec := c.tree.Spec(q)
	never := p.g.NeverEvicts || forbidden
	if !across {
		return c.evictWithin(p, preempt, spec.NoPreemption || never)
	}
	if c.tree.FitsFairShare(q, p.demand) && c.evictWithin(p, reclaimFair, spec.NoReclaim || never) {
		return true
	}
	return c.tree.FitsGuarantee(q, p.demand) && c.evictWithin(p, reclaimGuarantee, spec.NoReclaim || never)
}

// allowed reports whether p may evict rg under m with the queues' usage
// as it is now.
func (c *cycle) allowed(p *pending, rg *runningGroup, m evictMode) bool {
	if rg.evicted == c.epoch || rg.grown == c.epoch || rg.nonPreemptible {
		return false
	}
	q := rg.queue.q
	var ok bool
	switch m {
	case preempt:
		ok = q == p.q && rg.priority < p.g.Priority
	case reclaimFair:
		ok = !c.tree.Related(q, p.q) && c.tree.KeepsFairShare(q, rg.use)
	default:
		ok = !c.tree.Related(q, p.q) && c.tree.KeepsGuarantee(q, rg.use)
	}
	return ok && !c.protects(rg)
}

// victims returns the running groups p may evict under m, to be taken in
// the queue's order. A group none of whose pods runs on a node where a pod
// of p could ever run is left out: evicting it frees nothing p can use.
//
// Only queues that could give anything are read: p's own queue when it
// runs a preemptible group of lower priority (preempt), and queues outside
// p's branch above their fair share in a scarce resource (fair-share
// reclaim) or leaf queues above their GPU guarantee (guarantee reclaim),
// which allowed requires of every victim's queue.
func (c *cycle) victims(p *pending, m evictMode) *victimQueue {
	h := &c.victimBuf
	h.c, h.p, h.m, h.cursors = c, p, m, h.cursors[:0]
	c.feasible.reset(c.s.st, p.g)
	if m == preempt {
		if c.minPrio[p.q] < int64(p.g.Priority) {
			h.add(p.q, 0)
		}
	} else {
		for q := range c.leaves {
			if len(c.leaves[q]) == 0 || c.tree.Related(q, p.q) {
				continue
			}
			// The queues' usage changes as victims are taken; the
			// order is fixed by the usage before.
			switch {
			case m == reclaimFair && c.tree.AboveFairShare(q):
				h.add(q, c.tree.Over(q, model.Resources{}))
			case m == reclaimGuarantee && c.tree.IsLeaf(q) && c.tree.BorrowedGPU(q) > 0:
				h.add(q, float64(c.tree.BorrowedGPU(q)))
			}
		}
	}
	heap.Init(h)
	return h
}

// victimQueue yields victims from the cheapest (victimOrder: lowest
// priority, then the fewest GPU-hours lost, then newest), then the
// largest key; names are unique, so the order is total. The key is how
// far the victim's queue is above its fair share (fair-share reclaim) or
// its GPU guarantee (guarantee reclaim); 0 for preemption. Every victim it
// yields is one the rule allows, so reclaim takes the cheapest among all
// the queues that may give, not the cheapest of the queue furthest above
// its share. Blind to checkpoints (victimOrder.byAge) the key comes
// first: the furthest queue gives its lowest priority, newest groups. It merges the queues' groups, each queue's already in
// cheapest-first order, and tests them only as it reaches them: a group
// usually needs the first few. Testing late takes the same victims as
// testing all first: a queue's usage only falls while victims are taken,
// so a group allowed late was allowed before, and one refused late would
// be refused when taken (tryEvict tests again).
type victimQueue struct {
	c       *cycle
	p       *pending
	m       evictMode
	cursors []cursor
}

// cursor walks one queue entry's groups, cheapest first; order[pos] is
// the next group p may evict.
type cursor struct {
	order []*runningGroup
	pos   int
	key   float64
}

// add queues the groups of queue q under key.
func (h *victimQueue) add(q int, key float64) {
	for _, e := range h.c.leaves[q] {
		cur := cursor{order: e.cheapestFirst(h.c.order), key: key}
		if h.advance(&cur) {
			h.cursors = append(h.cursors, cur)
		}
	}
}

// advance moves cur to its next group p may evict and that holds
// something p can use, and reports whether there is one.
func (h *victimQueue) advance(cur *cursor) bool {
	for ; cur.pos < len(cur.order); cur.pos++ {
		if rg := cur.order[cur.pos]; h.c.allowed(h.p, rg, h.m) && h.c.useful(rg) {
			return true
		}
	}
	return false
}

func (h *victimQueue) Len() int { return len(h.cursors) }
func (h *victimQueue) Less(i, j int) bool {
	a, b := &h.cursors[i], &h.cursors[j]
	if !h.c.order.byAge {
		if x := h.c.order.compare(a.order[a.pos], b.order[b.pos]); x != 0 {
			return x < 0
		}
	}
	if a.key != b.key {
		return a.key > b.key
	}
	return h.c.order.compare(a.order[a.pos], b.order[b.pos]) < 0
}
func (h *victimQueue) Swap(i, j int) { h.cursors[i], h.cursors[j] = h.cursors[j], h.cursors[i] }
func (h *victimQueue) Push(x any)    { h.cursors = append(h.cursors, x.(cursor)) }
func (h *victimQueue) Pop() any {
	v := h.cursors[len(h.cursors)-1]
	h.cursors = h.cursors[:len(h.cursors)-1]
	return v
}

// next returns the next victim, or nil when none is left.
func (h *victimQueue) next() *runningGroup {
	if len(h.cursors) == 0 {
		return nil
	}
	cur := &h.cursors[0]
	rg := cur.order[cur.pos]
	cur.pos++
	if h.advance(cur) {
		heap.Fix(h, 0)
	} else {
		heap.Pop(h)
	}
	return rg
}

// victimOrder orders running groups from the cheapest to evict to the
// most valuable, as of a time: lowest priority first; then, unless byAge,
// the fewest GPU-hours lost (lost); then the most recently started.
type victimOrder struct {
	now   int64
	byAge bool
}

// lost is the work evicting g at now loses, in milli-GPU times Now's
// unit: its GPUs times the time since its restart point (its last
// checkpoint, or its start when it never checkpointed or checkpointed
// before it started).
func (g *runningGroup) lost(now int64) int64 {
	return g.use.GPUMilli * max(0, now-g.restart)
}

// young reports whether rg has run for less than its minimum runtime: its
// own (its priority class's) or its queue's, the larger; preemption and
// reclaim leave it alone until then.
func (c *cycle) young(rg *runningGroup) bool {
	_, young := c.ofAge(rg)
	return young
}

func (o victimOrder) compare(a, b *runningGroup) int {
	if x := cmp.Compare(a.priority, b.priority); x != 0 {
		return x
	}
	if !o.byAge {
		if x := cmp.Compare(a.lost(o.now), b.lost(o.now)); x != 0 {
			return x
		}
	}
	if x := cmp.Compare(b.started, a.started); x != 0 {
		return x
	}
	return cmp.Compare(a.name, b.name)
}

// useful reports whether rg holds anything on a node the filter's group
// statically fits.
func (c *cycle) useful(rg *runningGroup) bool {
	for _, ps := range rg.members {
		if c.feasible.fits(ps.node) {
			return true
		}
	}
	return false
}

// tryEvict takes p's victims under m one at a time until p fits, gives
// back every victim p can do without (reprieve), and then commits the
// remaining evictions and p's binds as one statement; or it rolls
// everything back. It reports whether p was placed. With forbidden (p's
// queue does not allow m) it only finds out whether p would fit, notes
// that on p for its Unplaced reason, and rolls back.
func (c *cycle) tryEvict(p *pending, m evictMode, forbidden bool) bool {
	if m == preempt && c.minPrio[p.q] >= int64(p.g.Priority) {
		return false // nothing of lower priority runs in p's queue to shrink or evict
	}
	// Elastic groups give up their members above their minimum before any
	// group is evicted whole (elastic.go).
	if !forbidden && c.tryShrink(p, m) {
		return true
	}
	victims := c.victims(p, m)
	if victims.Len() == 0 {
		return false
	}
	st := c.s.st
	mark := st.Checkpoint()
	var taken []*runningGroup
	var binds []model.Bind
	pods := 0
	for v := victims.next(); v != nil && len(taken) < maxVictims; v = victims.next() {
		if !c.allowed(p, v, m) {
			continue // an earlier victim of its queue used up what it could give
		}
		if c.budget >= 0 && pods+len(v.members) > c.budget {
			break
		}
		c.release(v)
		c.tree.AddUsage(v.queue.q, model.Resources{}.Sub(v.use))
		taken = append(taken, v)
		pods += len(v.members)
		if b, ok := c.fits(p); ok {
			binds = b
			break
		}
	}
	if binds == nil || forbidden {
		c.undo(mark, taken)
		if binds != nil {
			p.forbidden = model.UnplacedPreemptionDisabled
			if m != preempt {
				p.forbidden = model.UnplacedReclaimDisabled
			}
		}
		return false
	}
	binds, spared := c.reprieve(p, taken, binds)
	var evicted []*runningGroup
	for k, v := range taken {
		if !spared[k] {
			evicted = append(evicted, v)
		}
	}
	if !c.assign(p, binds) {
		c.undo(mark, evicted)
		return false
	}
	pods = 0
	var victimPods []string
	for _, v := range evicted {
		v.evicted = c.epoch
		c.lose(v, len(v.members))
		members := v.byNodeAndName()
		c.keepVacated(members)
		pods += len(v.members)
		for _, ps := range members {
			a := ps.a
			c.d.Evictions = append(c.d.Evictions, model.Eviction{Pod: a.Pod, Group: a.Group, Node: a.Node, For: p.g.Name, Reason: m.reason()})
			victimPods = append(victimPods, a.Pod)
		}
	}
	if c.budget > 0 {
		c.budget -= pods
	}
	if len(victimPods) == 0 {
		c.commit(p, binds) // the reprieve spared every victim
		return true
	}
	c.startHold(p, binds, victimPods)
	return true
}

// undo rolls the state back to mark and gives the queues back the usage
// of the victims released since.
func (c *cycle) undo(mark placement.Mark, released []*runningGroup) {
	for _, v := range released {
		c.tree.AddUsage(v.queue.q, v.use)
	}
	c.s.st.Rollback(mark)
}

// fits reports whether p places on the state as it is, and with which
// binds, leaving the state as it was.
func (c *cycle) fits(p *pending) ([]model.Bind, bool) {
	if !c.tree.Admits(p.q, p.admit) {
		return nil, false
	}
	mark := c.s.st.Checkpoint()
	binds, ok := c.place(p, nil)
	c.s.st.Rollback(mark)
	return binds, ok
}

// reprieve goes over the taken victims from the most valuable to the
// cheapest, puts each one's allocations back and keeps it running when p
// still places. It returns which victims are spared and p's binds computed
// with exactly the others evicted; the state is left with those released.
func (c *cycle) reprieve(p *pending, taken []*runningGroup, binds []model.Bind) ([]model.Bind, []bool) {
	spared := make([]bool, len(taken))
	order := make([]int, len(taken))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int { return c.order.compare(taken[b], taken[a]) })
	st := c.s.st
	for _, k := range order {
		v := taken[k]
		mark := st.Checkpoint()
		if !c.restore(v) {
			st.Rollback(mark)
			continue
		}
		c.tree.AddUsage(v.queue.q, v.use)
		if b, ok := c.fits(p); ok {
			binds, spared[k] = b, true
			continue
		}
		c.tree.AddUsage(v.queue.q, model.Resources{}.Sub(v.use))
		st.Rollback(mark)
	}
	return binds, spared
}

// restore assigns rg's allocations back to the state; on false the caller
// rolls back what it did assign.
func (c *cycle) restore(rg *runningGroup) bool {
	for _, ps := range rg.members {
		if c.s.st.Hold(ps.node, &ps.a.Request, ps.a.GPUs) != nil {
			return false
		}
	}
	return true
}

// assign applies binds of p, computed on the state as it is, to the state;
// on false nothing of them is left assigned.
func (c *cycle) assign(p *pending, binds []model.Bind) bool {
	st := c.s.st
	mark := st.Checkpoint()
	// place binds pods in the group's order, so one pass matches them.
	k := 0
	for _, b := range binds {
		for k < len(p.g.Pods) && p.g.Pods[k].Name != b.Pod {
			k++
		}
		// A plan made in an earlier cycle (a hold) meets its pod
		// constraints again against the pods now placed.
		if k == len(p.g.Pods) || b.Alternative >= max(len(p.g.Pods[k].Request.FirstOf), 1) {
			st.Rollback(mark)
			return false
		}
		req := p.g.Pods[k].Request.Alt(b.Alternative)
		if !st.Allows(b.NodeIndex, req) || st.Assign(b.NodeIndex, req, b.GPUs) != nil || !slices.Equal(st.LastVolumes(), b.Volumes) {
			st.Rollback(mark)
			return false
		}
		k++
	}
	return true
}

// nodeFilter answers, for one pending group at a time, whether any of the
// group's pods statically fits a node (placement.StaticFits), working out
// each node once.
type nodeFilter struct {
	st *placement.State // the nodes, and which are closed
	g  *model.PodGroup
	// in, when not nil, keeps the filter to the nodes whose in[i] is
	// inID: one domain of a topology gang's required level.
	in   []int32
	inID int32
	reqs []*model.Request // g's requests, consecutive repeats dropped; nil until needed
	gen  uint32
	seen []uint32 // seen[i] == gen: ok[i] holds for g
	ok   []bool
}

// reset points the filter at group g on the nodes of st.
func (f *nodeFilter) reset(st *placement.State, g *model.PodGroup) {
	if n := len(st.Nodes); len(f.seen) != n {
		f.seen, f.ok, f.gen = make([]uint32, n), make([]bool, n), 0
	}
	if f.gen++; f.gen == 0 {
		clear(f.seen)
		f.gen = 1
	}
	f.st, f.g, f.reqs = st, g, f.reqs[:0]
}

// fits reports whether a pod of the group statically fits node i, and
// the node is open to placement (kept free for no other group).
func (f *nodeFilter) fits(i int) bool {
	if f.in != nil && f.in[i] != f.inID || f.st.Closed(i) {
		return false
	}
	if f.seen[i] == f.gen {
		return f.ok[i]
	}
	if len(f.reqs) == 0 {
		for k := range f.g.Pods {
			r := &f.g.Pods[k].Request
			if k == 0 || !reflect.DeepEqual(r, &f.g.Pods[k-1].Request) {
				f.reqs = append(f.reqs, r)
			}
		}
	}
	ok := false
	for _, r := range f.reqs {
		if placement.StaticFits(f.st.Nodes[i].Node, r) {
			ok = true
			break
		}
	}
	f.seen[i], f.ok[i] = f.gen, ok
	return ok
}
