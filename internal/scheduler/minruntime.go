package scheduler

import "math"

// Minimum runtime. A running group younger than its minimum runtime (its
// priority class's, Allocation.MinRuntime, or its queue's, the larger:
// young) is no victim of preemption or reclaim, is not shrunk and is not
// moved. A group that would fit only by evicting such groups waits, and
// says so (model.UnplacedVictimsTooYoung) with when the first of them
// reaches its minimum: pastMinRuntime finds that out, only for a group
// whose victim search met a group it refused for its age.

// protects reports whether rg is kept from eviction by its minimum
// runtime in this cycle, noting when it reaches it for the group victims
// are sought for (youngAt); with pastYoung, it protects nothing.
func (c *cycle) protects(rg *runningGroup) bool {
	at, young := c.ofAge(rg)
	if !young {
		return false
	}
	c.youngAt = min(c.youngAt, at)
	return !c.pastYoung
}

// ofAge returns when rg reaches its minimum runtime, and whether it has
// not yet.
func (c *cycle) ofAge(rg *runningGroup) (int64, bool) {
	m := rg.minRuntime
	if c.minRuntime != nil {
		m = max(m, c.minRuntime[rg.queue.q])
	}
	return rg.started + m, m > 0 && c.snap.Now-rg.started < m
}

// pastMinRuntime finds out, for p, which its evictions did not place and
// whose victim search refused groups for their age, whether it would fit
// were they victims too, changing nothing; if so, p waits for them
// (pending.youngAt). A queue or pods that forbid the eviction say that
// instead.
func (c *cycle) pastMinRuntime(p *pending, q int, across bool) {
	spec := c.tree.Spec(q)
	if p.youngAt != 0 || p.forbidden != "" || p.g.NeverEvicts || (!across && spec.NoPreemption) || (across && spec.NoReclaim) {
		return
	}
	at := c.youngAt
	c.pastYoung = true
	c.evictOne(p, q, across, true)
	c.pastYoung = false
	if p.forbidden != "" {
		// The eviction would have placed p: it waits for the victims'
		// minimum runtime, not for a policy.
		p.forbidden, p.youngAt = "", at
	}
	c.youngAt = math.MaxInt64
}
