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
// the pod will take: the rest is still held by the victims. finish gives
// it back.
func (c *cycle) reserve(p *pending, plan []model.Bind) {
	st := c.s.st
	for _, b := range plan {
		req := podOf(p, b.Pod).Request.Alt(b.Alternative)
		ns := &st.Nodes[b.NodeIndex]
		// The waiting pod counts for other pods' affinity and spread as
		// though placed: it keeps its namespace, labels and affinity.
		t := taken{node: b.NodeIndex, req: model.Request{
			MilliCPU:  clamp(req.MilliCPU, ns.FreeCPU),
			MemoryMiB: clamp(req.MemoryMiB, ns.FreeMem),
			Namespace: req.Namespace, Labels: req.Labels, Affinity: req.Affinity,
		}}
		for _, sh := range b.GPUs {
			g := sh.Index
			if g < 0 || g >= len(ns.GPUFree) {
				continue
			}
			part := model.GPUShare{Index: g, Milli: clamp(sh.Milli, ns.GPUFree[g]), MIGSlices: int(clamp(int64(sh.MIGSlices), int64(ns.SliceFree[g])))}
			if ns.Node.GPUs[g].MemoryMiB > 0 {
				part.MemoryMiB = clamp(sh.MemoryMiB, ns.GPUMem[g])
			}
			t.shares = append(t.shares, part)
		}
		if st.Assign(t.node, &t.req, t.shares) == nil {
			c.held = append(c.held, t)
		}
	}
}

// clamp is want, at most free, at least 0.
func clamp(want, free int64) int64 { return max(0, min(want, free)) }

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
