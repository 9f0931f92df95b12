package scheduler

import (
	"cmp"
	"slices"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// running indexes the pods applied to the scheduler's state: by name, by
// node, by group and by queue name. sync and finish keep it in step with
// the state as pods come and go, so that a cycle reads running groups and
// queue usage without going over every pod.
type running struct {
	pods   map[string]*podState
	onNode [][]*podState
	groups map[string]*runningGroup
	// queues lists the queue names anything runs under; byName finds
	// them.
	queues []*queueEntry
	byName map[string]*queueEntry
	// dirty lists the groups whose members changed since the last settle.
	dirty []*runningGroup
	// movable counts the indexed groups whose members are all Movable:
	// with none, defragmentation has nothing to look for.
	movable int
	// exiting holds the pods being deleted (Request.Terminating) that
	// hold room: a cycle lets groups wait for it (waitExiting).
	exiting map[*podState]struct{}
}

// podState is one running pod as applied to the state.
type podState struct {
	// a is the pod's allocation: an element of a snapshot's chunk, which
	// its driver never modifies, or the core's own copy for a bind.
	a    *model.Allocation
	node int
	slot int // index in running.onNode[node]
	// queue counts the pod's usage: the queue named by a.Queue.
	queue  *queueEntry
	g      *runningGroup
	member int // index in g.members
	// kept is the sync in which a snapshot allocation matched the pod.
	kept uint64
}

// runningGroup is the running pods of one group (a lone pod is a group of
// its own), the unit evictions take. Its fields other than members and
// use are derived by settle: priority and queue are those of the member
// with the smallest pod name (all members agree unless the snapshot is
// inconsistent), started is the latest start, nonPreemptible holds
// when any member is, minRuntime is the largest of the members' and
// restart is the point evicting the group sends it back to: the earliest
// of its members' (each the later of its start and its last checkpoint).
type runningGroup struct {
	name           string
	queue          *queueEntry // where the group is indexed; nil while unindexed
	slot           int         // index in queue.groups
	priority       int32
	started        int64
	minRuntime     int64
	restart        int64
	nonPreemptible bool
	// minMember is the group's declared gang size (Allocation.MinMember,
	// the largest its members state; 0: all of them), which an elastic
	// group shrinks toward (elastic.go); movable holds when every member
	// is Movable and the group may be moved at all (defrag.go).
	minMember int
	movable   bool
	// shrinks is set while the group is listed in its queue's elastic,
	// at elasticSlot.
	shrinks     bool
	elasticSlot int
	members     []*podState
	use         model.Resources
	// evicted is the cycle (Scheduler.epoch) that evicted the group.
	evicted uint64
	// part is the group's pending part in the cycle partAt, when its
	// members count toward its gang; grown is the cycle that placed it
	// or held room for it, counting on them (lose, grow).
	part   *pending
	partAt uint64
	grown  uint64
	// seen is scratch for a look over the groups of a domain
	// (movableReason): the last look that met the group.
	seen  uint64
	dirty bool
	// sortedIn is the entry whose order holds the group, if any.
	sortedIn *queueEntry
}

// queueEntry is what runs under one queue name. Names the queue tree does
// not know map to its default queue, per cycle, as pending groups do.
type queueEntry struct {
	name  string
	slot  int             // index in running.queues
	usage model.Resources // of the pods naming this queue
	pods  int
	// groups are the running groups indexed under this queue; prios
	// counts the preemptible ones by priority.
	groups []*runningGroup
	prios  map[int32]int
	// elastic lists the preemptible groups that could shrink
	// (runningGroup.surplus), so that a shrink reads only them.
	elastic []*runningGroup
	// order is groups from the cheapest to evict (victimOrder.compare),
	// brought up to date only when an eviction reads it after groups
	// changed or with another order (by is the one it was sorted by).
	order      []*runningGroup
	orderStale bool
	by         victimOrder
	// q is the queue's index in the current cycle's tree.
	q int
}

func newRunning(nodes int) *running {
	return &running{pods: map[string]*podState{}, onNode: make([][]*podState, nodes),
		groups: map[string]*runningGroup{}, byName: map[string]*queueEntry{}, exiting: map[*podState]struct{}{}}
}

// groupKey is the running group an allocation belongs to.
func groupKey(a *model.Allocation) string {
	if a.Group == "" {
		return gpupod.LonePodGroupPrefix + a.Pod
	}
	return a.Group
}

// add indexes allocation a on node; the caller has assigned it to the
// state.
func (r *running) add(a *model.Allocation, node int) *podState {
	ps := &podState{a: a, node: node, slot: len(r.onNode[node])}
	r.onNode[node] = append(r.onNode[node], ps)
	r.pods[a.Pod] = ps
	if a.Request.Terminating && !a.Request.NotPod {
		r.exiting[ps] = struct{}{}
	}
	use := a.Usage()
	ps.queue = r.entry(a.Queue)
	ps.queue.usage = ps.queue.usage.Add(use)
	ps.queue.pods++
	key := groupKey(a)
	g := r.groups[key]
	if g == nil {
		g = &runningGroup{name: key}
		r.groups[key] = g
	}
	ps.g, ps.member = g, len(g.members)
	g.members = append(g.members, ps)
	g.use = g.use.Add(use)
	r.touch(g)
	return ps
}

// find returns the pod named pod applied on node n, or nil. A node holds
// a handful of pods: looking through them beats a look-up in a map of the
// whole cluster's.
func (r *running) find(n int, pod string) *podState {
	on := r.onNode[n]
	if len(on) > 32 {
		if ps := r.pods[pod]; ps != nil && ps.node == n {
			return ps
		}
		return nil
	}
	for _, ps := range on {
		if ps.a.Pod == pod {
			return ps
		}
	}
	return nil
}

// drop removes ps from the index; the caller releases it from the state
// (or already has).
func (r *running) drop(ps *podState) {
	if r.pods[ps.a.Pod] == ps {
		delete(r.pods, ps.a.Pod)
	}
	delete(r.exiting, ps)
	on := r.onNode[ps.node]
	last := on[len(on)-1]
	on[ps.slot], last.slot = last, ps.slot
	on[len(on)-1] = nil
	r.onNode[ps.node] = on[:len(on)-1]
	use := ps.a.Usage()
	ps.queue.usage = ps.queue.usage.Sub(use)
	ps.queue.pods--
	r.tidy(ps.queue)
	g := ps.g
	m := g.members[len(g.members)-1]
	g.members[ps.member], m.member = m, ps.member
	g.members[len(g.members)-1] = nil
	g.members = g.members[:len(g.members)-1]
	g.use = g.use.Sub(use)
	r.touch(g)
}

func (r *running) touch(g *runningGroup) {
	if !g.dirty {
		g.dirty = true
		r.dirty = append(r.dirty, g)
	}
}

// settle derives the changed groups' fields from their members and
// re-indexes them under their queues; empty groups go.
func (r *running) settle() {
	for _, g := range r.dirty {
		g.dirty = false
		if g.queue != nil {
			r.unindex(g)
		}
		if len(g.members) == 0 {
			delete(r.groups, g.name)
			continue
		}
		rep := g.members[0]
		g.started, g.nonPreemptible = rep.a.StartedAt, false
		g.minRuntime, g.restart = 0, max(rep.a.StartedAt, rep.a.LastCheckpoint)
		g.minMember, g.movable = 0, true
		for _, m := range g.members {
			if m.a.Pod < rep.a.Pod {
				rep = m
			}
			g.started = max(g.started, m.a.StartedAt)
			g.minRuntime = max(g.minRuntime, m.a.MinRuntime)
			g.restart = min(g.restart, max(m.a.StartedAt, m.a.LastCheckpoint))
			// A pod being deleted is on its way out: nothing evicts it again.
			g.nonPreemptible = g.nonPreemptible || m.a.NonPreemptible || m.a.Request.Terminating
			g.minMember = max(g.minMember, m.a.MinMember)
			// A group moves only as a named group (its pods wait again
			// under its name) and without devices through claims or
			// volumes, which stay where they were allocated (defrag.go).
			req := &m.a.Request
			g.movable = g.movable && m.a.Movable && m.a.Group == g.name && req.DeviceSet == "" && req.Volumes == nil && len(req.FirstOf) == 0
		}
		g.priority = rep.a.Priority
		e := r.entry(rep.a.Queue)
		g.queue, g.slot = e, len(e.groups)
		e.groups = append(e.groups, g)
		e.orderStale = true
		if !g.nonPreemptible {
			e.prios[g.priority]++
		}
		if g.movable {
			r.movable++
		}
		if g.shrinks = !g.nonPreemptible && g.surplus() > 0; g.shrinks {
			g.elasticSlot = len(e.elastic)
			e.elastic = append(e.elastic, g)
		}
	}
	clear(r.dirty)
	r.dirty = r.dirty[:0]
}

func (r *running) unindex(g *runningGroup) {
	e := g.queue
	last := e.groups[len(e.groups)-1]
	e.groups[g.slot], last.slot = last, g.slot
	e.groups[len(e.groups)-1] = nil
	e.groups = e.groups[:len(e.groups)-1]
	if !g.nonPreemptible {
		if e.prios[g.priority]--; e.prios[g.priority] == 0 {
			delete(e.prios, g.priority)
		}
	}
	if g.movable {
		r.movable--
	}
	if g.shrinks {
		last := e.elastic[len(e.elastic)-1]
		e.elastic[g.elasticSlot], last.elasticSlot = last, g.elasticSlot
		e.elastic[len(e.elastic)-1] = nil
		e.elastic = e.elastic[:len(e.elastic)-1]
		g.shrinks = false
	}
	g.queue = nil
	e.orderStale = true
	r.tidy(e)
}

// entry returns the queue entry of name, adding it if missing.
func (r *running) entry(name string) *queueEntry {
	e := r.byName[name]
	if e == nil {
		e = &queueEntry{name: name, slot: len(r.queues), prios: map[int32]int{}}
		r.byName[name] = e
		r.queues = append(r.queues, e)
	}
	return e
}

// tidy forgets e once nothing runs under it.
func (r *running) tidy(e *queueEntry) {
	if e.pods > 0 || len(e.groups) > 0 {
		return
	}
	delete(r.byName, e.name)
	last := r.queues[len(r.queues)-1]
	r.queues[e.slot], last.slot = last, e.slot
	r.queues[len(r.queues)-1] = nil
	r.queues = r.queues[:len(r.queues)-1]
}

// byNodeAndName returns g's members ordered by node, then pod name: the
// order evictions are reported in, whatever order the pods came in.
func (g *runningGroup) byNodeAndName() []*podState {
	out := slices.Clone(g.members)
	slices.SortFunc(out, func(x, y *podState) int {
		if c := cmp.Compare(x.node, y.node); c != 0 {
			return c
		}
		return cmp.Compare(x.a.Pod, y.a.Pod)
	})
	return out
}

// cheapestFirst returns e's groups from the cheapest to evict to the most
// valuable by o. It sorts again only after groups changed or when o is
// not the order it sorted by last (the work victims lose grows with time),
// starting from the last order (which sorts fast when little changed).
func (e *queueEntry) cheapestFirst(o victimOrder) []*runningGroup {
	if !e.orderStale && e.by == o {
		return e.order
	}
	// A group keeps its place only while it is indexed here and e is
	// where it was last sorted: one that another queue's order took up
	// meanwhile (its queue changed and changed back) comes in again below,
	// once.
	order := e.order[:0]
	for _, g := range e.order {
		switch {
		case g.sortedIn != e:
		case g.queue == e:
			order = append(order, g)
		default:
			g.sortedIn = nil
		}
	}
	for _, g := range e.groups {
		if g.sortedIn != e {
			g.sortedIn = e
			order = append(order, g)
		}
	}
	if len(order) < len(e.order) {
		clear(e.order[len(order):])
	}
	slices.SortFunc(order, o.compare)
	e.order, e.orderStale, e.by = order, false, o
	return order
}
