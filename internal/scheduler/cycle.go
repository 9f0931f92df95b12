package scheduler

import (
	"cmp"
	"math"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

type pending struct {
	g       *model.PodGroup
	q       int
	demand  model.Resources
	placed  bool
	blocked bool
}

type runningGroup struct {
	name           string
	q              int
	priority       int32
	started        int64
	nonPreemptible bool
	allocs         []*model.Allocation
	nodes          []int // allocs' node indexes (-1: unknown); nil until needed
	use            model.Resources
	evicted        bool
}

type cycle struct {
	s        *Scheduler
	snap     *model.Snapshot
	d        *model.Decisions
	tree     *queue.Tree
	capacity model.Resources
	queues   [][]*pending // per queue, in order
	running  []*runningGroup
	budget   int // evictions left; negative: unbounded
	// feasible and victimBuf are scratch space for evictions.
	feasible  nodeFilter
	victimBuf victimQueue
}

func (s *Scheduler) newCycle(snap *model.Snapshot, d *model.Decisions) (*cycle, error) {
	tree, err := newQueueTree(snap.Queues)
	if err != nil {
		return nil, err
	}
	c := &cycle{s: s, snap: snap, d: d, tree: tree, capacity: capacityOf(snap.Nodes), budget: snap.Budget.MaxEvictions,
		queues: make([][]*pending, tree.Len())}
	byGroup := map[string]*runningGroup{}
	for i := range snap.Running {
		a := &snap.Running[i]
		q := tree.Leaf(a.Queue)
		tree.AddUsage(q, model.Of(&a.Request))
		key := a.Group
		if key == "" {
			key = "pod/" + a.Pod
		}
		rg := byGroup[key]
		if rg == nil {
			rg = &runningGroup{name: key, q: q, priority: a.Priority, started: a.StartedAt}
			byGroup[key] = rg
			c.running = append(c.running, rg)
		}
		rg.nonPreemptible = rg.nonPreemptible || a.NonPreemptible
		rg.started = max(rg.started, a.StartedAt)
		rg.allocs = append(rg.allocs, a)
		rg.use = rg.use.Add(model.Of(&a.Request))
	}
	for i := range snap.Pending {
		g := &snap.Pending[i]
		if len(g.Pods) == 0 {
			continue
		}
		p := &pending{g: g, q: tree.Leaf(g.Queue)}
		for _, pod := range g.Pods {
			p.demand = p.demand.Add(model.Of(&pod.Request))
		}
		tree.AddDemand(p.q, p.demand)
		c.queues[p.q] = append(c.queues[p.q], p)
	}
	tree.ComputeFairShares(c.capacity)
	for _, qs := range c.queues {
		slices.SortFunc(qs, func(a, b *pending) int {
			if x := cmp.Compare(b.g.Priority, a.g.Priority); x != 0 {
				return x
			}
			if x := cmp.Compare(a.g.CreatedAt, b.g.CreatedAt); x != 0 {
				return x
			}
			return cmp.Compare(a.g.Name, b.g.Name)
		})
	}
	return c, nil
}

// place tries to put group p on the state as one statement: all of it (at
// least minMember pods) or nothing. It returns the binds.
func (c *cycle) place(p *pending, avoid map[int]bool) ([]model.Bind, bool) {
	st := c.s.st
	mark := st.Checkpoint()
	var binds []model.Bind
	for _, pod := range p.g.Pods {
		o, ok := c.s.placer.Place(&pod.Request)
		if !ok || avoid[o.Node] {
			continue
		}
		if err := st.Assign(o.Node, &pod.Request, o.Shares); err != nil {
			continue
		}
		binds = append(binds, model.Bind{Pod: pod.Name, Group: p.g.Name, Node: c.s.nodes[o.Node].Name, NodeIndex: o.Node, GPUs: o.Shares})
	}
	if len(binds) < p.g.Min() {
		st.Rollback(mark)
		return nil, false
	}
	return binds, true
}

func (c *cycle) used(binds []model.Bind, g *model.PodGroup) model.Resources {
	var r model.Resources
	for _, b := range binds {
		for _, pod := range g.Pods {
			if pod.Name == b.Pod {
				r = r.Add(model.Of(&pod.Request))
			}
		}
	}
	return r
}

func (c *cycle) commit(p *pending, binds []model.Bind) {
	p.placed = true
	c.tree.AddUsage(p.q, c.used(binds, p.g))
	c.tree.AddDemand(p.q, model.Resources{}.Sub(p.demand))
	c.d.Binds = append(c.d.Binds, binds...)
}

// allocate gives queues turns, lowest weighted dominant share first.
func (c *cycle) allocate() {
	next := make([]int, len(c.queues))
	for {
		best, bestShare := -1, math.Inf(1)
		for q, qs := range c.queues {
			if next[q] >= len(qs) || (next[q] > 0 && qs[next[q]-1].blocked) {
				continue
			}
			if sh := c.tree.DominantShare(q, c.capacity); sh < bestShare {
				best, bestShare = q, sh
			}
		}
		if best < 0 {
			return
		}
		p := c.queues[best][next[best]]
		next[best]++
		if !c.tree.Admits(p.q, p.demand) {
			p.blocked = true
			continue
		}
		if binds, ok := c.place(p, nil); ok {
			c.commit(p, binds)
		} else {
			p.blocked = true
		}
	}
}

// reservation is where a blocked head would go once lower-priority work in
// its queue and work of queues above their fair share made room.
func (c *cycle) reservation(head *pending) map[int]bool {
	st := c.s.st
	mark := st.Checkpoint()
	defer st.Rollback(mark)
	for _, rg := range c.running {
		if rg.evicted || rg.nonPreemptible {
			continue
		}
		lower := rg.q == head.q && rg.priority < head.g.Priority
		borrowed := rg.q != head.q && !c.tree.Related(rg.q, head.q) && c.tree.Over(rg.q, model.Resources{}) > 1
		if lower || borrowed {
			c.release(rg)
		}
	}
	binds, ok := c.place(head, nil)
	if !ok {
		return nil
	}
	out := map[int]bool{}
	for _, b := range binds {
		out[b.NodeIndex] = true
	}
	return out
}

func (c *cycle) release(rg *runningGroup) {
	for _, a := range rg.allocs {
		if n, ok := c.s.index[a.Node]; ok {
			c.s.st.Release(n, &a.Request, a.GPUs)
		}
	}
}

// backfill places later groups of blocked queues off their heads'
// reservations.
func (c *cycle) backfill() {
	for q, qs := range c.queues {
		var head *pending
		var reserved map[int]bool
		for _, p := range qs {
			if p.placed {
				continue
			}
			if head == nil {
				head = p
				reserved = c.reservation(head)
				continue
			}
			if !c.tree.Admits(q, p.demand) {
				continue
			}
			if binds, ok := c.place(p, reserved); ok {
				c.commit(p, binds)
			}
		}
	}
}

// finish records unplaced groups and keeps binds and evictions in the
// scheduler's state for the next (incremental) snapshot.
func (c *cycle) finish() {
	for _, qs := range c.queues {
		for _, p := range qs {
			if !p.placed {
				reason := "does not fit"
				if !c.tree.Admits(p.q, p.demand) {
					reason = "queue limit"
				}
				c.d.Unplaced = append(c.d.Unplaced, model.Unplaced{Group: p.g.Name, Reason: reason})
			}
		}
	}
	for _, e := range c.d.Evictions {
		delete(c.s.running, e.Pod)
	}
	reqs := map[string]model.Request{}
	for i := range c.snap.Pending {
		for _, pod := range c.snap.Pending[i].Pods {
			reqs[pod.Name] = pod.Request
		}
	}
	for _, b := range c.d.Binds {
		c.s.running[b.Pod] = applied{node: b.NodeIndex, req: reqs[b.Pod], shares: b.GPUs}
	}
	c.s.st.Commit()
}
