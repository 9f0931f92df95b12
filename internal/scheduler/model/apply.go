package model

import (
	"fmt"
	"maps"
	"slices"
)

// Apply changes snap as carrying out d at time now would, the way every
// driver of the core sees it: the Kubernetes adapter (through its
// informers), the simulator and the tests' harness. Evicted pods leave
// their nodes and wait again in their group; bound pods move from Pending
// to their node's chunk of RunningByNode. What a group still needs
// follows one rule, PodGroup.Min: each pending group's Placed is set to
// its members running after d, or, for a group that waited before, to
// what it had placed, less its members d evicted and plus those d bound,
// when that is more (its members that finished count, as they do on a
// cluster).
//
// The chunk rule of Snapshot holds: a chunk is never modified, a node that
// gains or loses a pod gets a new slice, and the others keep theirs, so
// the next cycle compares only the nodes d changed. RunningByNode itself
// is replaced, not written, so a copy of snap taken before keeps its view.
//
// The cycle's moves join the snapshot's Defrag.Recent (DefragPolicy.Record).
// The cycle's holds and its queues' usage over time (Decisions.Usage)
// become the snapshot's. A preemptor waits for its
// victims, which leave their nodes here at once, and is bound by the next
// cycle. Pending groups keep their order; a group that only evicted pods
// make pending again comes after them, in the order of its first eviction
// in d, its pods in the order of theirs, with its declared gang size from
// the allocations and its first start as its age.
//
// A bind to a node snap does not list or with an alternative its pod's
// request does not have (Bind.Alternative), or RunningByNode not aligned with
// Nodes, is an error, and snap is left as it was.
func Apply(snap *Snapshot, d *Decisions, now int64) error {
	chunks := snap.RunningByNode
	switch {
	case chunks == nil:
		chunks = make([][]Allocation, len(snap.Nodes))
	case len(chunks) != len(snap.Nodes):
		return fmt.Errorf("applying decisions: runningByNode has %d chunks for %d nodes", len(chunks), len(snap.Nodes))
	default:
		chunks = slices.Clone(chunks)
	}
	// fresh marks the chunks made here, which may be appended to.
	fresh := map[int]bool{}
	evicted := make(map[string]*Allocation, len(d.Evictions))
	for _, e := range d.Evictions {
		evicted[e.Pod] = nil
	}
	if len(evicted) > 0 {
		for n, chunk := range chunks {
			k := slices.IndexFunc(chunk, func(a Allocation) bool { _, ok := evicted[a.Pod]; return ok })
			if k < 0 {
				continue
			}
			keep := make([]Allocation, k, len(chunk)-1)
			copy(keep, chunk[:k])
			for i := k; i < len(chunk); i++ {
				if _, ok := evicted[chunk[i].Pod]; ok {
					evicted[chunk[i].Pod] = &chunk[i]
					continue
				}
				keep = append(keep, chunk[i])
			}
			chunks[n], fresh[n] = keep, true
		}
	}
	gone := maps.Clone(evicted) // the allocations evicted, by pod
	var again []string
	back := map[string]*PodGroup{}
	for _, e := range d.Evictions {
		a := evicted[e.Pod]
		if a == nil {
			continue // not running, or listed twice
		}
		evicted[e.Pod] = nil
		g := back[a.Group]
		if g == nil {
			g = &PodGroup{Name: a.Group, Queue: a.Queue, Priority: a.Priority, MinMember: a.MinMember, CreatedAt: a.StartedAt, NonPreemptible: a.NonPreemptible,
				MinRuntime: a.MinRuntime, Movable: a.Movable}
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
	var index map[string]int
	nodeOf := func(b *Bind) (int, error) {
		if n := b.NodeIndex; n >= 0 && n < len(snap.Nodes) && snap.Nodes[n].Name == b.Node {
			return n, nil
		}
		if index == nil {
			index = make(map[string]int, len(snap.Nodes))
			for n := range snap.Nodes {
				index[snap.Nodes[n].Name] = n
			}
		}
		n, ok := index[b.Node]
		if !ok {
			return 0, fmt.Errorf("applying decisions: pod %q is bound to node %q, which the snapshot does not list", b.Pod, b.Node)
		}
		return n, nil
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
			n, err := nodeOf(b)
			if err != nil {
				return err
			}
			if alts := len(p.Request.FirstOf); b.Alternative < 0 || b.Alternative >= max(alts, 1) {
				return fmt.Errorf("applying decisions: pod %q is bound with alternative %d of a request with %d", b.Pod, b.Alternative, alts)
			}
			if !fresh[n] {
				chunks[n] = slices.Clip(chunks[n]) // the append below copies it
				fresh[n] = true
			}
			chunks[n] = append(chunks[n], Allocation{Pod: p.Name, Group: g.Name, Queue: g.Queue, Priority: g.Priority, Node: b.Node,
				Request: p.Request.ClaimsBound(b), GPUs: b.GPUs, StartedAt: now, NonPreemptible: g.NonPreemptible, MinMember: g.MinMember, Slice: p.Slice,
				MinRuntime: g.MinRuntime, Movable: g.Movable})
		}
		if e := back[g.Name]; e != nil {
			rest.Pods = append(rest.Pods, e.Pods...)
			delete(back, g.Name)
		}
		if len(rest.Pods) > 0 {
			pending = append(pending, rest)
		}
	}
	returned := map[string]bool{}
	for _, name := range again {
		if g := back[name]; g != nil {
			pending = append(pending, *g)
			returned[name] = true
		}
	}
	dropBoundPVs(pending, d.Binds)
	members := make(map[string]int, len(pending))
	for i := range pending {
		members[pending[i].Name] = 0
	}
	for _, chunk := range chunks {
		for i := range chunk {
			if n, ok := members[chunk[i].Group]; ok {
				members[chunk[i].Group] = n + 1
			}
		}
	}
	// What a group had placed before d, less its members d evicted, plus
	// those it bound: members that finished stay counted, as a cluster
	// counts them (a group that waited already).
	was := make(map[string]int, len(snap.Pending))
	for i := range snap.Pending {
		g := &snap.Pending[i]
		was[g.Name] = g.Placed
		for _, p := range g.Pods {
			if bound[p.Name] != nil {
				was[g.Name]++
			}
		}
	}
	for _, e := range d.Evictions {
		if a := gone[e.Pod]; a != nil {
			if _, ok := was[a.Group]; ok {
				was[a.Group]--
			}
			gone[e.Pod] = nil // listed twice
		}
	}
	for i := range pending {
		g := &pending[i]
		g.Placed = max(members[g.Name], was[g.Name])
		if returned[g.Name] && g.MinMember > len(g.Pods)+g.Placed {
			// A group that ran with fewer members than its minimum (the
			// others finished, which a cluster counts as placed) comes
			// back as the members it had, or it could never start
			// again.
			g.MinMember = len(g.Pods) + g.Placed
		}
	}
	snap.RunningByNode, snap.Pending = chunks, pending
	snap.Holds = d.Holds
	snap.Usage = d.Usage
	snap.Defrag.Record(d.Moves, now)
	recordLayouts(snap, d.Layouts)
	return nil
}
