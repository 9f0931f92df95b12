package scheduler

import (
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
		if t, ok := c.keepRest(b.NodeIndex, podOf(p, b.Pod).Request.Alt(b.Alternative), b.GPUs, false); ok {
			c.held = append(c.held, t)
		}
	}
}

// keepRest takes what is free of req and shares on node i for the rest
// of the cycle (placement.State.Rest), Terminating when it is the room of
// a pod being evicted, and returns it; ok is false when it took nothing.
func (c *cycle) keepRest(i int, req *model.Request, shares []model.GPUShare, terminating bool) (t taken, ok bool) {
	st := c.s.st
	t.node = i
	t.req, t.shares = st.Rest(i, req, shares)
	t.req.Terminating = terminating
	if st.Hold(i, &t.req, t.shares) != nil {
		return t, false
	}
	return t, true
}

// vacating is a pod evicted in this cycle and what of its room it keeps.
type vacating struct {
	ps *podState
	t  taken
}

// keepVacated keeps, for the rest of the cycle, the room the pods of ps
// leave, evicted in this cycle and released from the state, less what the
// group they make room for took of it: they hold it until they exit, so
// no pod placed in this cycle may be bound there. Only a group that waits
// for them may use it (waitVacated). finish gives it back.
func (c *cycle) keepVacated(ps []*podState) {
	for _, m := range ps {
		if t, ok := c.keepRest(m.node, &m.a.Request, m.a.GPUs, true); ok {
			c.vacated = append(c.vacated, vacating{ps: m, t: t})
		}
	}
}

// waitVacated places p in the room that pods evicted earlier in the cycle
// leave (keepVacated), before p evicts anything: p is held there, waiting
// for the evicted pods on the nodes where it takes some of their room,
// and is bound with them gone, as their own preemptor is. It reports
// whether p was placed; when it was not, the state is as it was.
func (c *cycle) waitVacated(p *pending) bool {
	if len(c.vacated) == 0 {
		return false
	}
	st := c.s.st
	mark := st.Checkpoint()
	for i := range c.vacated {
		t := &c.vacated[i].t
		st.Release(t.node, &t.req, t.shares)
	}
	binds, ok := c.fits(p)
	if !ok || !c.assign(p, binds) {
		st.Rollback(mark)
		return false
	}
	// What p took of their room shows as a smaller rest: p waits for
	// every evicted pod on the nodes where one's rest shrank.
	before := c.vacated
	c.vacated = make([]vacating, 0, len(before))
	short := map[int]bool{}
	for _, v := range before {
		t, ok := c.keepRest(v.ps.node, &v.ps.a.Request, v.ps.a.GPUs, true)
		if ok {
			c.vacated = append(c.vacated, vacating{ps: v.ps, t: t})
		}
		if !ok || t.smaller(&v.t) {
			short[v.ps.node] = true
		}
	}
	var victims []string
	for _, v := range before {
		if short[v.ps.node] {
			victims = append(victims, v.ps.a.Pod)
		}
	}
	if len(victims) == 0 {
		c.commit(p, binds)
		return true
	}
	c.startHold(p, binds, victims)
	return true
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
