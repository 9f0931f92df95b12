package scheduler

import (
	"cmp"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// resumeHolds takes up the snapshot's holds before any group is placed.
// A hold whose victims are all gone binds its plan, when the plan still
// fits and the queue still admits the group; one whose victims still run
// keeps, for this cycle, the room they have freed on its plan's GPUs (and
// its plan's CPU and memory) out of reach of every other group, counts in
// its queue's usage as a placed group would, and is returned again with
// the victims left. A hold past the snapshot's
// HoldTimeout, one whose plan no longer fits and one whose group no longer
// waits are dropped: the group, if still pending, competes afresh in this
// very cycle.
func (c *cycle) resumeHolds() {
	if len(c.snap.Holds) == 0 {
		return
	}
	byName := map[string]*pending{}
	for _, qs := range c.queues {
		for _, p := range qs {
			byName[p.g.Name] = p
		}
	}
	for i := range c.snap.Holds {
		h := &c.snap.Holds[i]
		p := byName[h.Group]
		if p == nil && h.Moved {
			c.keepMoved(h) // a moved group whose pods are not pending yet (defrag.go)
			continue
		}
		if p == nil || p.placed {
			continue // the group is gone, or listed twice
		}
		var left []string
		for _, v := range h.Victims {
			if c.s.run.pods[v] != nil {
				left = append(left, v)
			}
		}
		if len(left) == 0 {
			binds, ok := c.rebase(p, h.Plan)
			if ok && c.tree.Admits(p.q, p.admit) && c.assign(p, binds) {
				c.commit(p, binds)
			} else {
				c.s.log.Debug("a preemptor's plan no longer fits; it competes afresh", "group", h.Group)
			}
			continue
		}
		if c.snap.HoldTimeout > 0 && c.snap.Now-h.Since >= c.snap.HoldTimeout {
			c.s.log.Debug("a preemptor's victims did not exit in time; it competes afresh", "group", h.Group, "left", len(left))
			p.waitedOut = true
			continue
		}
		plan, ok := c.rebase(p, h.Plan)
		if !ok {
			continue
		}
		p.placed, p.waiting = true, len(left)
		c.grow(p)
		c.reserve(p, plan)
		c.count(p, plan)
		c.d.Holds = append(c.d.Holds, model.Hold{Group: h.Group, Plan: plan, Victims: left, Since: h.Since, Moved: h.Moved})
	}
}

// rebase points a plan's binds at the nodes' indexes in this snapshot; it
// fails when a node is gone or going away (Disrupted), or the plan names
// a pod the group no longer has pending, or an alternative its request no
// longer has.
func (c *cycle) rebase(p *pending, plan []model.Bind) ([]model.Bind, bool) {
	if len(plan) < p.min() || p.missing > 0 {
		return nil, false
	}
	out := make([]model.Bind, len(plan))
	for k, b := range plan {
		i, ok := c.s.index[b.Node]
		// The pod still pending, with the alternative its bind chose.
		at := slices.IndexFunc(p.g.Pods, func(pod model.Pod) bool { return pod.Name == b.Pod })
		if !ok || c.s.nodes[i].Disrupted || at < 0 || b.Alternative < 0 || b.Alternative >= max(len(p.g.Pods[at].Request.FirstOf), 1) {
			return nil, false
		}
		b.NodeIndex, b.Group = i, p.g.Name
		out[k] = b
	}
	// A plan made by the topology keeps it on the nodes as they are.
	if p.g.Topology != nil && (p.bad != "" || !c.topologyOf(p).keepsTopology(out)) {
		return nil, false
	}
	return out, true
}

// reserve takes, for each pod of a waiting plan, what is free now of what
// the pod will take (placement.State.Rest): the rest is still held by
// the victims. The waiting pod counts for other pods' affinity and spread
// as though placed. finish gives it back.
func (c *cycle) reserve(p *pending, plan []model.Bind) {
	for _, b := range plan {
		if t, ok := c.keepRest(b.NodeIndex, podOf(p, b.Pod).Request.Alt(b.Alternative), b.GPUs, nil); ok {
			c.held = append(c.held, t)
		}
	}
}

// keepRest takes what is free of req and shares on node i for the rest
// of the cycle (placement.State.Rest), with vols (Rest leaves a pod's
// volumes out, as for a pod yet to run; a running pod's stay attached),
// and returns it; ok is false when the state refused it.
func (c *cycle) keepRest(i int, req *model.Request, shares []model.GPUShare, vols *model.PodVolumes) (t taken, ok bool) {
	st := c.s.st
	t.node = i
	t.req, t.shares = st.Rest(i, req, shares)
	t.req.Volumes = vols
	if st.Hold(i, &t.req, t.shares) != nil {
		return t, false
	}
	return t, true
}

// vacating is a pod evicted in this cycle, released from the state though
// it runs until it exits, and base, the part of its room no group placed
// so far waits for.
type vacating struct {
	ps   *podState
	base taken
}

// keepVacated notes the pods of ps, evicted in this cycle and released
// from the state, with what is free of their room once the group they
// make room for took its part. The room stays free to place in, but a
// group placed in it waits for them (vacatedUnder): they hold it until
// they exit, so nothing is bound there in this cycle. Their labels and
// affinity go back in the state for the cycle (finish takes them out),
// so that other pods' affinity and anti-affinity still see them.
func (c *cycle) keepVacated(ps []*podState) {
	from := len(c.vacated)
	st := c.s.st
	for _, m := range ps {
		c.vacated = append(c.vacated, vacating{ps: m})
		// Other pods' terms still see it, as one being deleted.
		if r := &m.a.Request; r.Namespace != "" || len(r.Labels) > 0 || r.Affinity != nil {
			t := taken{node: m.node, req: model.Request{Namespace: r.Namespace, Labels: r.Labels, Affinity: r.Affinity, Terminating: true, NotPod: true}}
			if st.Hold(m.node, &t.req, nil) == nil {
				c.held = append(c.held, t)
			}
		}
	}
	var nodes []int
	for _, m := range ps {
		if slices.Contains(nodes, m.node) {
			continue
		}
		nodes = append(nodes, m.node)
		c.rests(m.node, func(k int, t taken) {
			if k >= from {
				c.vacated[k].base = t
			}
		})
	}
}

// vacatedUnder returns the pods evicted in this cycle whose room binds,
// just assigned to the state, take some of: every such pod on a node
// where the free room no longer holds what an evicted pod there had left
// (its base). Their bases become what is left now, so that the next
// group is measured against the room this one left.
func (c *cycle) vacatedUnder(binds []model.Bind) []string {
	if len(c.vacated) == 0 {
		return nil
	}
	var victims []string
	var seen []int
	for _, b := range binds {
		n := b.NodeIndex
		if slices.Contains(seen, n) {
			continue
		}
		seen = append(seen, n)
		short := false
		c.rests(n, func(k int, t taken) { short = short || t.smaller(&c.vacated[k].base) })
		if !short {
			continue
		}
		c.rests(n, func(k int, t taken) {
			c.vacated[k].base = t
			victims = append(victims, c.vacated[k].ps.a.Pod)
		})
	}
	return victims
}

// rests calls f with the index in c.vacated and the rest
// (placement.State.Rest) of each pod evicted in this cycle on node n, in
// order, as though each took its rest back in turn; the state is left as
// it was.
func (c *cycle) rests(n int, f func(k int, t taken)) {
	st := c.s.st
	mark := st.Checkpoint()
	for k := range c.vacated {
		v := &c.vacated[k]
		if v.ps.node != n {
			continue
		}
		t, _ := c.keepRest(n, &v.ps.a.Request, v.ps.a.GPUs, nil) // within what is free: it fits
		f(k, t)
	}
	st.Rollback(mark)
}

// exitRest is a pod being deleted that a group waits for, and rest, the
// part of its room it keeps in the state meanwhile.
type exitRest struct {
	ps   *podState
	rest taken
}

// waitExiting places p, before it evicts anything, in room that running
// pods being deleted (Request.Terminating) hold: p is held there,
// waiting for the pods whose room it takes, as for victims of its own,
// instead of evicting others while they exit. Each such pod keeps what p
// leaves of its room for the rest of the cycle, its labels, affinity and
// volumes with it; finish puts it back whole. A group whose hold timed out
// this cycle does not wait again: a pod may take long to go. It reports
// whether p was placed; when it was not, the state is as it was.
func (c *cycle) waitExiting(p *pending) bool {
	r := c.s.run
	if len(r.exiting) == 0 || p.waitedOut {
		return false
	}
	if c.exiting == nil {
		c.exiting = make([]*podState, 0, len(r.exiting))
		for ps := range r.exiting {
			c.exiting = append(c.exiting, ps)
		}
		slices.SortFunc(c.exiting, func(x, y *podState) int {
			if d := cmp.Compare(x.node, y.node); d != 0 {
				return d
			}
			return cmp.Compare(x.a.Pod, y.a.Pod)
		})
	}
	ex := c.exiting
	st := c.s.st
	mark := st.Checkpoint()
	for _, ps := range ex {
		st.Release(ps.node, &ps.a.Request, ps.a.GPUs)
	}
	binds, ok := c.fits(p)
	if !ok || !c.assign(p, binds) {
		st.Rollback(mark)
		return false
	}
	// Each pod goes back whole where p left it room; p waits for those
	// that do not.
	var victims []string
	for _, ps := range ex {
		if st.Hold(ps.node, &ps.a.Request, ps.a.GPUs) == nil {
			continue
		}
		t, _ := c.keepRest(ps.node, &ps.a.Request, ps.a.GPUs, ps.a.Request.Volumes) // within what is free: it fits
		c.exited = append(c.exited, exitRest{ps: ps, rest: t})
		victims = append(victims, ps.a.Pod)
	}
	if len(victims) == 0 {
		// p fits beside them after all: the room freed elsewhere since
		// the allocation holds it.
		c.commit(p, binds)
		return true
	}
	c.startHold(p, binds, victims)
	return true
}

// restoreExited puts the pods being deleted that waitExiting left only
// part of their room back in the state whole, once the room held for
// waiting groups is given back (finish): the state goes on from the
// running pods as they are.
func (c *cycle) restoreExited() {
	st := c.s.st
	for i := range c.exited {
		v := &c.exited[i]
		st.Release(v.rest.node, &v.rest.req, v.rest.shares)
		if err := st.Hold(v.ps.node, &v.ps.a.Request, v.ps.a.GPUs); err != nil {
			c.s.log.Error("a pod being deleted no longer fits where it runs", "pod", v.ps.a.Pod, "err", err)
		}
	}
}

// smaller reports whether t takes less than u of anything u takes.
func (t *taken) smaller(u *taken) bool {
	a, b := &t.req, &u.req
	if a.MilliCPU < b.MilliCPU || a.MemoryMiB < b.MemoryMiB || a.NotPod && !b.NotPod || len(a.HostPorts) < len(b.HostPorts) {
		return true
	}
	for k, v := range b.Scalars {
		if a.Scalars[k] < v {
			return true
		}
	}
	for _, y := range u.shares {
		k := slices.IndexFunc(t.shares, func(x model.GPUShare) bool { return x.Index == y.Index })
		if k < 0 {
			return true
		}
		if x := t.shares[k]; x.Milli < y.Milli || x.MemoryMiB < y.MemoryMiB || x.MIGSlices < y.MIGSlices {
			return true
		}
	}
	return false
}

// startHold records p as waiting for victims, evicted for it this cycle,
// to exit before binds, its placement, are carried out. The plan keeps its
// room for the rest of the cycle and counts in its queue's usage meanwhile,
// as a placed group would; finish gives the room back.
func (c *cycle) startHold(p *pending, binds []model.Bind, victims []string) {
	for _, v := range c.vacatedUnder(binds) {
		if !slices.Contains(victims, v) {
			victims = append(victims, v)
		}
	}
	c.hold(p, binds, victims)
}

// hold is startHold with victims complete: the pods evicted in this cycle
// whose room binds take (vacatedUnder) are among them.
func (c *cycle) hold(p *pending, binds []model.Bind, victims []string) {
	p.placed, p.waiting = true, len(victims)
	c.grow(p)
	for _, b := range binds {
		c.held = append(c.held, taken{node: b.NodeIndex, req: *podOf(p, b.Pod).Request.Alt(b.Alternative), shares: b.GPUs})
	}
	c.count(p, binds)
	c.d.Holds = append(c.d.Holds, model.Hold{Group: p.g.Name, Plan: binds, Victims: victims, Since: c.snap.Now})
}

// count adds a waiting plan to its queue's usage and takes the group's
// demand off, as commit does for a bound group, so that the queue's quota
// and fair share see the room the group is about to take.
func (c *cycle) count(p *pending, plan []model.Bind) {
	var used model.Resources
	for _, b := range plan {
		used = used.Add(podOf(p, b.Pod).Request.Alt(b.Alternative).UsageOn(b.GPUs))
	}
	c.tree.AddUsage(p.q, used)
	c.tree.AddDemand(p.q, model.Resources{}.Sub(p.demand))
}

// podOf is the group's pending pod of that name; rebase made sure it is
// there.
func podOf(p *pending, name string) *model.Pod {
	return &p.g.Pods[slices.IndexFunc(p.g.Pods, func(pod model.Pod) bool { return pod.Name == name })]
}
