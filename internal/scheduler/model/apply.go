package model

// Apply changes snap as carrying out d at time now would, the way every
// driver of the core sees it: the Kubernetes adapter (through its
// informers), the simulator and the tests' harness. Evicted pods leave
// Running and wait again in their group; bound pods move from Pending to
// Running. What a group still needs follows one rule, PodGroup.Min: each
// pending group's Placed is set to its members in Running after d.
//
// The cycle's holds become the snapshot's: a preemptor waits for its
// victims, which leave Running here at once, and is bound by the next
// cycle. Pending groups keep their order; a group that only evicted pods make
// pending again comes after them, in the order of its first eviction, with
// its declared gang size from the allocations and its first start as its
// age. Only snap.Running is read and written: a driver that hands the
// core RunningByNode keeps its own books (the adapter rebuilds them from
// the cluster).
func Apply(snap *Snapshot, d *Decisions, now int64) {
	evicted := make(map[string]bool, len(d.Evictions))
	for _, e := range d.Evictions {
		evicted[e.Pod] = true
	}
	var again []string
	back := map[string]*PodGroup{}
	keep := snap.Running[:0:0]
	for _, a := range snap.Running {
		if !evicted[a.Pod] {
			keep = append(keep, a)
			continue
		}
		g := back[a.Group]
		if g == nil {
			g = &PodGroup{Name: a.Group, Queue: a.Queue, Priority: a.Priority, MinMember: a.MinMember, CreatedAt: a.StartedAt, NonPreemptible: a.NonPreemptible}
			back[a.Group] = g
			again = append(again, a.Group)
		}
		g.CreatedAt = min(g.CreatedAt, a.StartedAt)
		g.Pods = append(g.Pods, Pod{Name: a.Pod, Request: a.Request})
	}
	bound := make(map[string]*Bind, len(d.Binds))
	for i := range d.Binds {
		bound[d.Binds[i].Pod] = &d.Binds[i]
	}
	pending := make([]PodGroup, 0, len(snap.Pending)+len(again))
	for _, g := range snap.Pending {
		rest := g
		rest.Pods = nil
		for _, p := range g.Pods {
			b := bound[p.Name]
			if b == nil {
				rest.Pods = append(rest.Pods, p)
				continue
			}
			keep = append(keep, Allocation{Pod: p.Name, Group: g.Name, Queue: g.Queue, Priority: g.Priority, Node: b.Node,
				Request: p.Request, GPUs: b.GPUs, StartedAt: now, NonPreemptible: g.NonPreemptible, MinMember: g.MinMember})
		}
		if e := back[g.Name]; e != nil {
			rest.Pods = append(rest.Pods, e.Pods...)
			delete(back, g.Name)
		}
		if len(rest.Pods) > 0 {
			pending = append(pending, rest)
		}
	}
	for _, name := range again {
		if g := back[name]; g != nil {
			pending = append(pending, *g)
		}
	}
	members := map[string]int{}
	for i := range keep {
		members[keep[i].Group]++
	}
	for i := range pending {
		pending[i].Placed = members[pending[i].Name]
	}
	snap.Running, snap.Pending = keep, pending
	snap.Holds = d.Holds
	recordLayouts(snap, d.Layouts)
}
