package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

type pending struct {
	g      *model.PodGroup
	q      int
	demand model.Resources
	// admit is what the queue must admit: demand, or the group's
	// MinResources where larger.
	admit   model.Resources
	placed  bool
	blocked bool
	// forbidden is the eviction its queue's policy refused, where the group
	// would have fit by it; "" otherwise.
	forbidden string
	// waiting counts the evicted pods the group waits for (it holds room,
	// placed is set and nothing is bound); 0 when it does not wait.
	// waitedOut: its hold ended this cycle past Snapshot.HoldTimeout, so
	// it no longer waits for pods being deleted (waitExiting).
	waiting   int
	waitedOut bool
	// bad says what is wrong with the group's topology, which keeps it
	// from being placed; topo is its topology placement (topology.go).
	bad  string
	topo *gangTopo
	// missing counts the pods a gang lacks to reach its MinMember (with
	// those placed or finished): it waits for them, never placed in part.
	missing int
	// youngAt, when not 0, is when the first of the victims it would fit
	// by, all younger than their minimum runtime, reaches it.
	youngAt int64
	// rg is the group's running members when they count toward its gang
	// (Placed), nil otherwise; lost counts those this cycle evicted
	// (lose), which no longer do.
	rg   *runningGroup
	lost int
}

// min is how many of p's pods must be placed together in this cycle:
// PodGroup.Min, with the members this cycle evicted no longer placed.
func (p *pending) min() int {
	if p.lost == 0 {
		return p.g.Min()
	}
	g := p.g
	return min(len(g.Pods), max(1, g.MinMember-(g.Placed-p.lost)))
}

// out reports whether p takes no part in the cycle's placements: its
// topology means nothing, or members of its gang are missing.
func (p *pending) out() bool { return p.bad != "" || p.missing > 0 }

// taken is room the cycle holds for a waiting preemptor, given back to the
// state when the cycle finishes.
type taken struct {
	node   int
	req    model.Request
	shares []model.GPUShare
}

// bound is the group and pod of one bind.
type bound struct {
	g   *model.PodGroup
	pod *model.Pod
}

type cycle struct {
	s *Scheduler
	// admitted memoises, for aboveNodeLimits, the GPUs of the nodes a
	// set of node selectors admits, by the selectors.
	admitted map[string]int64
	snap     *model.Snapshot
	d        *model.Decisions
	tree     *queue.Tree
	capacity model.Resources
	queues   [][]*pending // per queue, in order
	// epoch stamps the running groups this cycle evicts.
	epoch uint64
	// leaves lists, per queue of the tree, the queue entries whose
	// running groups count in it; minPrio is the lowest priority of a
	// preemptible one (math.MaxInt64 when none).
	leaves  [][]*queueEntry
	minPrio []int64
	// minRuntime is, per queue of the tree, the largest MinRuntime on its
	// path to the root; nil when no queue sets one.
	minRuntime []int64
	// order is how victims are chosen this cycle.
	order  victimOrder
	bound  []bound // per bind in d.Binds
	budget int     // evictions left; negative: unbounded
	// held is the room taken for waiting preemptors (holds.go), and
	// vacated the pods evicted in this cycle, which hold their room until
	// they exit (keepVacated).
	held    []taken
	vacated []vacating
	// exiting lists the running pods being deleted, by node and name,
	// once a cycle needs it; exited are those a group waits for, each
	// with the part of its room it keeps meanwhile (waitExiting).
	exiting []*podState
	exited  []exitRest
	// feasible and victimBuf are scratch space for evictions.
	feasible  nodeFilter
	victimBuf victimQueue
	// within, when not -1, is the domain of its required level a
	// topology gang must be placed in: the one an eviction frees room in.
	within int32
	// movableLooks counts the nodes looked at for movable pods
	// (movableReason); movBuf and shareBuf are its scratch space.
	movableLooks int
	movBuf       []*runningGroup
	shareBuf     []model.GPUShare
	// short is the last shortfall of free GPUs moves found (defrag.go).
	short shortfall
	// recent is the groups moves keep in place for their name
	// (movedRecently); nil until needed.
	recent map[string]bool
	// drained marks the nodes this cycle drains (drain.go); nil when none.
	drained map[int]bool
	// kept is, per group whose drained nodes are kept free for it rather
	// than emptied by moves, those nodes (Unplaced.Kept); nil when none.
	kept map[*pending][]model.KeptNode
	// youngAt is, for the group evictions run for, when the first victim
	// refused for its minimum runtime reaches it (math.MaxInt64: none
	// was); pastYoung counts such groups as victims (minruntime.go).
	youngAt   int64
	pastYoung bool
}

func (s *Scheduler) newCycle(snap *model.Snapshot, d *model.Decisions) (*cycle, error) {
	tree, err := newQueueTree(snap.Queues)
	if err != nil {
		return nil, err
	}
	c := &cycle{s: s, snap: snap, d: d, tree: tree, capacity: s.capacity, budget: snap.Budget.MaxEvictions, epoch: s.epoch, within: -1,
		order:  victimOrder{now: snap.Now, byAge: snap.VictimsByAge},
		queues: make([][]*pending, tree.Len()), leaves: make([][]*queueEntry, tree.Len()), minPrio: make([]int64, tree.Len())}
	for q := range c.minPrio {
		c.minPrio[q] = math.MaxInt64
	}
	for _, e := range s.run.queues {
		e.q = tree.Leaf(e.name)
		tree.AddUsage(e.q, e.usage)
		if len(e.groups) > 0 {
			c.leaves[e.q] = append(c.leaves[e.q], e)
		}
		for prio := range e.prios {
			c.minPrio[e.q] = min(c.minPrio[e.q], int64(prio))
		}
	}
	for i := range snap.Pending {
		g := &snap.Pending[i]
		if len(g.Pods) == 0 {
			continue
		}
		p := &pending{g: g, q: tree.Leaf(g.Queue)}
		if t := g.Topology; t != nil {
			if err := t.Check("topology"); err != nil {
				p.bad = err.Error()
			}
		}
		for _, pod := range g.Pods {
			for k := range pod.Request.FirstOf {
				if len(pod.Request.FirstOf[k].FirstOf) > 0 {
					return nil, fmt.Errorf("pod %q: request.firstOf[%d] has alternatives of its own: an alternative is one request", pod.Name, k)
				}
			}
			p.demand = p.demand.Add(pod.Request.Resources())
		}
		p.admit = p.demand.Max(g.MinResources)
		if g.MinMember > 0 && len(g.Pods)+g.Placed < g.MinMember {
			// Placing what is there would start the gang in part, and
			// its demand is not yet what it will be.
			p.missing = g.MinMember - g.Placed - len(g.Pods)
		} else {
			tree.AddDemand(p.q, p.demand)
		}
		if g.MinMember > 0 && g.Placed > 0 {
			// Its running members count toward its gang: evicting them
			// changes what it needs (lose), and placing it keeps them
			// (grow).
			if rg := s.run.groups[g.Name]; rg != nil {
				p.rg, rg.part, rg.partAt = rg, p, c.epoch
			}
		}
		c.queues[p.q] = append(c.queues[p.q], p)
	}
	c.queuePolicies()
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

// groups calls f for every running group counted in queue q.
func (c *cycle) groups(q int, f func(*runningGroup)) {
	for _, e := range c.leaves[q] {
		for _, rg := range e.groups {
			f(rg)
		}
	}
}

// place tries to put group p on the state as one statement: all of it (at
// least minMember pods) or nothing. It returns the binds.
func (c *cycle) place(p *pending, avoid map[int]bool) ([]model.Bind, bool) {
	if p.g.Topology != nil {
		return c.placeTopology(p, avoid)
	}
	st := c.s.st
	mark := st.Checkpoint()
	var binds []model.Bind
	for k := range p.g.Pods {
		// By pointer: the state journals the request's address, and a
		// copy of the pod would be made on the heap for every one.
		pod := &p.g.Pods[k]
		o, alt, ok := c.placeOne(&pod.Request)
		if !ok || avoid[o.Node] {
			continue
		}
		if err := st.Assign(o.Node, pod.Request.Alt(alt), o.Shares); err != nil {
			continue
		}
		binds = append(binds, model.Bind{Pod: pod.Name, Group: p.g.Name, Node: c.s.nodes[o.Node].Name, NodeIndex: o.Node, GPUs: o.Shares, Alternative: alt,
			Volumes: st.LastVolumes()})
	}
	if len(binds) < p.min() {
		st.Rollback(mark)
		return nil, false
	}
	return binds, true
}

// placeOne finds where the placer puts req, and which of its
// alternatives (model.Request.FirstOf) it places: the first that places
// on some node, as the request promises.
func (c *cycle) placeOne(req *model.Request) (placement.Option, int, bool) {
	if len(req.FirstOf) == 0 {
		o, ok := c.s.placer.Place(req)
		return o, 0, ok
	}
	for k := range req.FirstOf {
		if o, ok := c.s.placer.Place(&req.FirstOf[k]); ok {
			return o, k, true
		}
	}
	return placement.Option{}, 0, false
}

// commit records p as placed with binds, made by place in the order of
// p's pods, and moves their usage from its queue's demand to its usage.
func (c *cycle) commit(p *pending, binds []model.Bind) {
	if victims := c.vacatedUnder(binds); len(victims) > 0 {
		// Room a pod evicted in this cycle still holds: p waits for it.
		c.hold(p, binds, victims)
		return
	}
	p.placed = true
	c.grow(p)
	var used model.Resources
	k := 0
	for _, b := range binds {
		for k < len(p.g.Pods) && p.g.Pods[k].Name != b.Pod {
			k++
		}
		pod := &p.g.Pods[k]
		used = used.Add(pod.Request.Alt(b.Alternative).UsageOn(b.GPUs))
		c.bound = append(c.bound, bound{g: p.g, pod: pod})
		k++
	}
	c.tree.AddUsage(p.q, used)
	c.tree.AddDemand(p.q, model.Resources{}.Sub(p.demand))
	c.d.Binds = append(c.d.Binds, binds...)
}

// allocate gives queues turns: the branch of highest queue priority first
// (Queue.Priority, compared between siblings), then the lowest weighted
// dominant share, and among equal shares (queues using nothing, say) the
// lowest share once the queue's next group runs, so that the queue of the
// larger weight, tilted by its usage over time, goes first: a team that
// used nothing lately before one that used the cluster, though neither
// runs anything now.
func (c *cycle) allocate() {
	next := make([]int, len(c.queues))
	for {
		best, bestShare, bestAfter := -1, math.Inf(1), -1.0
		for q, qs := range c.queues {
			if next[q] >= len(qs) || (next[q] > 0 && qs[next[q]-1].blocked) {
				continue
			}
			sh := c.tree.DominantShare(q, c.capacity)
			if best < 0 {
				best, bestShare, bestAfter = q, sh, -1
				continue
			}
			x := c.tree.ComparePriority(q, best)
			if x == 0 && sh == bestShare {
				// A tie: compare the shares after each queue's next group,
				// computed only now (rare; the common case is no tie).
				if bestAfter < 0 {
					bestAfter = c.tree.DominantShareWith(best, c.queues[best][next[best]].demand, c.capacity)
				}
				if after := c.tree.DominantShareWith(q, qs[next[q]].demand, c.capacity); after < bestAfter {
					best, bestShare, bestAfter = q, sh, after
				}
				continue
			}
			if x < 0 || x == 0 && sh < bestShare {
				best, bestShare, bestAfter = q, sh, -1
			}
		}
		if best < 0 {
			return
		}
		p := c.queues[best][next[best]]
		next[best]++
		if p.placed || p.out() {
			continue // bound or waiting from a hold (resumeHolds); or not placed as it is
		}
		if !c.tree.Admits(p.q, p.admit) {
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
	free := func(rg *runningGroup) bool {
		return rg.evicted != c.epoch && rg.grown != c.epoch && !rg.nonPreemptible && !c.young(rg)
	}
	if c.minPrio[head.q] < int64(head.g.Priority) {
		c.groups(head.q, func(rg *runningGroup) {
			if free(rg) && rg.priority < head.g.Priority {
				c.release(rg)
			}
		})
	}
	for q := range c.leaves {
		if len(c.leaves[q]) == 0 || c.tree.Related(q, head.q) || c.tree.Over(q, model.Resources{}) <= 1 {
			continue
		}
		c.groups(q, func(rg *runningGroup) {
			if free(rg) {
				c.release(rg)
			}
		})
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
	for _, ps := range rg.members {
		c.s.st.Release(ps.node, &ps.a.Request, ps.a.GPUs)
	}
}

// backfill places later groups of blocked queues off their heads'
// reservations.
func (c *cycle) backfill() {
	for q, qs := range c.queues {
		var head *pending
		var reserved map[int]bool
		for _, p := range qs {
			if p.placed || p.out() {
				continue
			}
			if head == nil {
				head = p
				// A head its queue's quota holds back reserves nothing:
				// room on the nodes would not let it start, and it waits
				// for its queue's usage to drop, not for capacity.
				if c.tree.Admits(q, head.admit) {
					reserved = c.reservation(head)
				}
				continue
			}
			if !c.tree.Admits(q, p.admit) {
				continue
			}
			if binds, ok := c.place(p, reserved); ok {
				c.commit(p, binds)
			}
		}
	}
}

// finish records unplaced groups and applies the binds and evictions to
// the running index ahead of the snapshot (the state has them already),
// noting their nodes for the next sync to compare with what the driver
// did.
func (c *cycle) finish() {
	var waiting []comingWait
	for _, qs := range c.queues {
		for _, p := range qs {
			if p.waiting > 0 {
				c.d.Unplaced = append(c.d.Unplaced, model.Unplaced{Group: p.g.Name, Code: model.UnplacedWaitingForVictims,
					Reason: fmt.Sprintf("waiting for %d evicted pod(s) to exit", p.waiting), Wait: waitFor(model.UnplacedWaitingForVictims)})
			}
			if !p.placed {
				u := model.Unplaced{Group: p.g.Name, Code: model.UnplacedNoFit, Reason: "does not fit"}
				least := leastNeed(p.g)
				switch {
				case p.bad != "":
					u.Code, u.Reason = model.UnplacedBadTopology, p.bad
				case p.missing > 0:
					u.Code, u.Missing = model.UnplacedMissingMembers, p.missing
					u.Reason = fmt.Sprintf("gang of minMember %d has %d pod(s): waiting for %d more", p.g.MinMember, len(p.g.Pods)+p.g.Placed-p.lost, p.missing)
				case !c.tree.Admits(p.q, p.admit):
					u.Code, u.Reason = model.UnplacedQueueLimit, "queue limit"
					if q, over := c.tree.LimitBelow(p.q, p.admit); over {
						// Waiting cannot help: say so, and what to change.
						u.Code, u.Need, u.Queue, u.Limit = model.UnplacedAboveQueueLimit, p.admit, c.tree.Name(q), c.tree.Spec(q).Limit
						u.Reason = fmt.Sprintf("needs %s admitted, above queue %q's limit %s", describe(p.admit), u.Queue, describe(u.Limit))
					}
				case p.g.Min() > 1 && c.snap.NodesMayBeAdded && c.aboveNodeLimits(p.g, least, &u):
					// All or none: an autoscaler would buy nodes for some
					// of its pods and stop at the limit.
				case p.g.Min() > 1 && !c.snap.NodesMayBeAdded && !least.Fits(c.capacity):
					// A gang only: a pod alone that no node can hold hears
					// why of each node, which says more. With a node
					// autoscaler, the nodes it adds may hold it.
					u.Code, u.Need, u.Capacity = model.UnplacedAboveCapacity, least, c.capacity
					u.Reason = fmt.Sprintf("needs at least %s, more than all nodes have together (%s)", describe(least), describe(c.capacity))
				case c.kept[p] != nil:
					// What the cycle does for it comes before what its
					// queue or its pods forbid: nodes are being emptied.
					u.Kept = c.kept[p]
					u.Reason = keptReason(u.Kept)
					if p.g.Explain {
						c.explain(p, &u)
					}
				case p.forbidden != "" && p.g.NeverEvicts:
					u.Code = p.forbidden
					u.Reason = "fits only by evicting other pods, and its pods have preemptionPolicy: Never"
				case p.forbidden == model.UnplacedPreemptionDisabled:
					u.Code = p.forbidden
					u.Reason = fmt.Sprintf("fits only by preempting lower-priority pods, and queue %q has spec.preemption: Never", c.tree.Name(p.q))
				case p.forbidden == model.UnplacedReclaimDisabled:
					u.Code = p.forbidden
					u.Reason = fmt.Sprintf("fits only by reclaiming GPUs lent to other queues, and queue %q has spec.reclaim: Never", c.tree.Name(p.q))
				case p.youngAt != 0:
					u.Code, u.OfAge = model.UnplacedVictimsTooYoung, p.youngAt
					u.Reason = "fits only by evicting pods younger than their minimum runtime: it waits for them to reach it"
				case p.g.Topology != nil:
					c.topologyReason(p, &u)
					if p.g.Explain {
						c.explain(p, &u)
					}
				case p.g.Explain:
					c.explain(p, &u)
				}
				u.Wait = waitFor(u.Code)
				if u.Wait == model.WaitCapacity {
					waiting = append(waiting, comingWait{k: len(c.d.Unplaced), p: p})
				}
				c.d.Unplaced = append(c.d.Unplaced, u)
			}
		}
	}
	// Groups that the nodes already bought will start wait for them.
	c.awaitComing(waiting)
	c.queueStatus()
	s := c.s
	// The room held for waiting preemptors is theirs for this cycle only:
	// the next one takes it again from the holds, against the victims the
	// snapshot then shows.
	for i := range c.held {
		t := &c.held[i]
		s.st.Release(t.node, &t.req, t.shares)
		s.touched = append(s.touched, t.node)
	}
	c.restoreExited()
	s.st.Open() // the nodes kept free (keepFree)
	for _, e := range c.d.Evictions {
		if e.Reason == model.EvictDisruption {
			continue // running until it exits (disrupt)
		}
		if ps := s.run.pods[e.Pod]; ps != nil {
			s.touched = append(s.touched, ps.node)
			s.run.drop(ps)
		}
	}
	for i, b := range c.d.Binds {
		g, pod := c.bound[i].g, c.bound[i].pod
		if old := s.run.pods[b.Pod]; old != nil {
			// The snapshot has the pod both pending and running; it
			// cannot be in two places.
			s.st.Release(old.node, &old.a.Request, old.a.GPUs)
			s.touched = append(s.touched, old.node)
			s.run.drop(old)
		}
		a := &model.Allocation{Pod: b.Pod, Group: g.Name, Queue: g.Queue, Priority: g.Priority, Node: b.Node,
			Request: pod.Request.ClaimsBound(&c.d.Binds[i]), GPUs: b.GPUs, StartedAt: c.snap.Now, NonPreemptible: g.NonPreemptible, Slice: pod.Slice,
			MinRuntime: g.MinRuntime, MinMember: g.MinMember, Movable: g.Movable}
		s.run.add(a, b.NodeIndex)
		s.touched = append(s.touched, b.NodeIndex)
	}
	s.st.Commit()
}

// waitFor is what a group unplaced with code waits for: the one rule
// that says which of the core's reasons more nodes would cure
// (model.WaitCapacity) and which they would not.
func waitFor(code string) string {
	switch code {
	case model.UnplacedQueueLimit, model.UnplacedAboveQueueLimit:
		return model.WaitQuota
	case model.UnplacedMissingMembers:
		return model.WaitGang
	case model.UnplacedWaitingForVictims:
		return model.WaitVictims
	case model.UnplacedBadTopology:
		return model.WaitSpec
	case model.UnplacedNodesComing:
		return model.WaitComing
	case model.UnplacedAboveNodeLimits:
		return model.WaitNodeLimits
	}
	// UnplacedNoFit, UnplacedAboveCapacity, the topology codes, and the
	// evictions a policy forbids: room would start them.
	return model.WaitCapacity
}

// describe prints a quota vector for a reason: its non-zero components.
func describe(r model.Resources) string {
	var parts []string
	if r.MilliCPU != 0 {
		parts = append(parts, fmt.Sprintf("cpu %dm", r.MilliCPU))
	}
	if r.MemoryMiB != 0 {
		parts = append(parts, fmt.Sprintf("memory %dMi", r.MemoryMiB))
	}
	if r.GPUMilli != 0 {
		parts = append(parts, "GPUs "+gpuNumber(r.GPUMilli))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// gpuNumber is milli-GPU as a number of GPUs: "2", "2.5".
func gpuNumber(milli int64) string {
	return strconv.FormatFloat(float64(milli)/model.MilliPerGPU, 'f', -1, 64)
}

// leastNeed is the least group g can start with: for each resource, the
// sum of the requests of its Min() smallest pods. (Each resource is summed
// over its own smallest pods, so no set of Min() pods needs less.)
func leastNeed(g *model.PodGroup) model.Resources {
	k := g.Min()
	if k >= len(g.Pods) {
		var r model.Resources
		for i := range g.Pods {
			r = r.Add(g.Pods[i].Request.Resources())
		}
		return r
	}
	cpu, mem, gpu := make([]int64, len(g.Pods)), make([]int64, len(g.Pods)), make([]int64, len(g.Pods))
	for i := range g.Pods {
		r := g.Pods[i].Request.Resources()
		cpu[i], mem[i], gpu[i] = r.MilliCPU, r.MemoryMiB, r.GPUMilli
	}
	sum := func(v []int64) int64 {
		slices.Sort(v)
		var t int64
		for _, x := range v[:k] {
			t += x
		}
		return t
	}
	return model.Resources{MilliCPU: sum(cpu), MemoryMiB: sum(mem), GPUMilli: sum(gpu)}
}

// admittedGPUs is the GPUs of the nodes selects admits, selects being
// reqs' node selectors: read once a cycle for each set of selectors, so
// that many gangs waiting alike walk the nodes once.
func (c *cycle) admittedGPUs(reqs []*model.Request, selects func(map[string]string) bool) int64 {
	var key strings.Builder
	for _, r := range reqs {
		for _, k := range slices.Sorted(maps.Keys(r.NodeSelector)) {
			key.WriteString(k + "=" + r.NodeSelector[k] + ",")
		}
		key.WriteByte(';')
	}
	k := key.String()
	if v, ok := c.admitted[k]; ok {
		return v
	}
	var now int64
	for i := range c.s.nodes {
		n := &c.s.nodes[i]
		if !selects(n.Labels) {
			continue
		}
		for _, gpu := range n.GPUs {
			now += gpu.Capacity()
		}
	}
	if c.admitted == nil {
		c.admitted = map[string]int64{}
	}
	c.admitted[k] = now
	return now
}

// aboveNodeLimits reports whether g's least need is above the most GPUs
// its pods may ever have (Snapshot.NodePools): those of the nodes some pod
// of g selects and those the node pools whose future nodes some pod
// selects may still add. It fills u when so. A pool of no limit that some
// pod selects, or no pools known, sets none.
func (c *cycle) aboveNodeLimits(g *model.PodGroup, least model.Resources, u *model.Unplaced) bool {
	if c.snap.NodePools == nil {
		return false
	}
	// The pods of a group mostly share one selector: each distinct
	// one is matched once.
	var reqs []*model.Request
	for i := range g.Pods {
		r := &g.Pods[i].Request
		if !slices.ContainsFunc(reqs, func(o *model.Request) bool { return maps.Equal(o.NodeSelector, r.NodeSelector) }) {
			reqs = append(reqs, r)
		}
	}
	selects := func(labels map[string]string) bool {
		return slices.ContainsFunc(reqs, func(r *model.Request) bool { return placement.Selects(r, labels) })
	}
	var room int64
	var names []string
	for i := range c.snap.NodePools {
		np := &c.snap.NodePools[i]
		if !selects(np.Labels) {
			continue
		}
		if np.Unlimited {
			return false
		}
		room += max(np.AddGPUMilli, 0)
		names = append(names, np.Name)
	}
	now := c.admittedGPUs(reqs, selects)
	if least.GPUMilli <= now+room {
		return false
	}
	u.Code, u.Need = model.UnplacedAboveNodeLimits, model.Resources{GPUMilli: least.GPUMilli}
	u.Capacity = model.Resources{GPUMilli: now + room}
	if len(names) == 0 {
		u.Reason = fmt.Sprintf("needs at least %s, more than the nodes its pods admit have together (%s), and the future nodes of no GPU node pool admit its pods",
			describe(u.Need), describe(u.Capacity))
		return true
	}
	slices.Sort(names)
	u.Reason = fmt.Sprintf("needs at least %s, more than the nodes its pods admit may have together once the autoscaler has added what the limits of the node pools they admit (%s) allow (%s; %s now)",
		describe(u.Need), strings.Join(names, ", "), describe(u.Capacity), describe(model.Resources{GPUMilli: now}))
	return true
}

// explain records on u where p's first pod was refused, node by node, the
// filter that refused it (the state as the cycle leaves it), and how many
// of p's pods would fit at once: what a waiting group's condition says.
func (c *cycle) explain(p *pending, u *model.Unplaced) {
	st := c.s.st
	first := &p.g.Pods[0].Request
	counts := map[string]int{}
	for i := range st.Nodes {
		// A request with alternatives is refused by a node when each of
		// them is: the reason is its first's.
		why := st.Why(i, first.Alt(0))
		for k := 1; why != "" && k < len(first.FirstOf); k++ {
			if st.Why(i, &first.FirstOf[k]) == "" {
				why = ""
			}
		}
		if why != "" {
			counts[why]++
		}
	}
	u.Explained, u.Nodes = true, len(st.Nodes)
	known := []string{placement.FilterUnschedulable, placement.FilterComing, placement.FilterSelector, placement.FilterKept, placement.FilterCPU, placement.FilterMemory, placement.FilterVolumeInUse, placement.FilterVolumeLimits, placement.FilterVolumeBinding,
		placement.FilterClaimDevices, placement.FilterGPUKind, placement.FilterGPU,
		placement.FilterSpread, placement.FilterPodAffinity, placement.FilterPodAntiAffinity, placement.FilterExistingAntiAffinity}
	for _, f := range known {
		if n := counts[f]; n > 0 {
			u.Filtered = append(u.Filtered, model.FilterCount{Filter: f, Nodes: n})
		}
	}
	// The other reasons (ports, pods, each scalar resource, ...) by name.
	for _, f := range slices.Sorted(maps.Keys(counts)) {
		if !slices.Contains(known, f) {
			u.Filtered = append(u.Filtered, model.FilterCount{Filter: f, Nodes: counts[f]})
		}
	}
	slices.SortStableFunc(u.Filtered, func(a, b model.FilterCount) int { return cmp.Compare(b.Nodes, a.Nodes) })
	mark := st.Checkpoint()
	for k := range p.g.Pods {
		req := &p.g.Pods[k].Request
	nodes:
		for i := range st.Nodes {
			for a := range max(len(req.FirstOf), 1) {
				r := req.Alt(a)
				if opts := st.Options(i, r); len(opts) > 0 && st.Assign(i, r, opts[0].Shares) == nil {
					u.Placeable++
					break nodes
				}
			}
		}
	}
	st.Rollback(mark)
}

// queueStatus records every queue's usage, fair share and guarantee as the
// cycle leaves them.
func (c *cycle) queueStatus() {
	c.d.Queues = make([]model.QueueStatus, c.tree.Len())
	for i := range c.d.Queues {
		c.d.Queues[i] = model.QueueStatus{Name: c.tree.Name(i), Usage: c.tree.Usage(i), FairShare: c.tree.FairShare(i), Guaranteed: c.tree.Guaranteed(i)}
	}
}

// queuePolicies reads the queues' policies over time: each minimum
// runtime, the largest on its path (a queue's applies to the queues
// below it), and, for each queue with a UsageHalfLife, its usage over
// time advanced to the snapshot's Now (queue.Decay) from the snapshot's
// Usage, which weighs its fair share and its turns (Tree.SetPast) and
// goes back out in Decisions.Usage.
func (c *cycle) queuePolicies() {
	var prev map[string]*model.QueueUsage
	for i := range c.tree.Len() {
		spec := c.tree.Spec(i)
		if spec.MinRuntime > 0 && c.minRuntime == nil {
			c.minRuntime = make([]int64, c.tree.Len())
			for q := range c.minRuntime {
				for _, j := range c.tree.Path(q) {
					c.minRuntime[q] = max(c.minRuntime[q], c.tree.Spec(j).MinRuntime)
				}
			}
		}
		if spec.UsageHalfLife <= 0 {
			continue
		}
		if prev == nil {
			prev = make(map[string]*model.QueueUsage, len(c.snap.Usage))
			for k := range c.snap.Usage {
				prev[c.snap.Usage[k].Queue] = &c.snap.Usage[k]
			}
		}
		u := queue.Decay(spec.Name, prev[spec.Name], c.tree.Usage(i), c.snap.Now, spec.UsageHalfLife)
		c.tree.SetPast(i, u)
		c.d.Usage = append(c.d.Usage, u)
	}
}
