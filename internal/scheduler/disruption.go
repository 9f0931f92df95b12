package scheduler

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// disrupt evicts the groups with a pod on a node about to go away
// (model.Node.Disrupted). A gang that lost a member would otherwise run on
// without it, or wait half-placed, so all its members go and it is placed
// again as one, keeping its place in its queue (its age and priority are
// its own). An elastic group (elastic.go) that keeps at least its declared
// gang size on the nodes that stay loses only its members on the nodes
// going away (Eviction.Shrink): it runs on, and they wait in their group
// to rejoin it as room appears, as members a shrink gave up do. The
// evictions count against no disruption budget (the node goes anyway) and
// spare only what nothing may evict (NonPreemptible: another scheduler's
// pods, those a PodDisruptionBudget protects, those already terminating),
// which whoever drains the node stops. The pods keep their room until
// they exit: the snapshot says when, so the cycle releases nothing and
// finish keeps them running.
func (c *cycle) disrupt() {
	s := c.s
	for _, i := range s.disrupted {
		for _, ps := range s.run.onNode[i] {
			rg := ps.g
			if rg == nil || rg.evicted == c.epoch || rg.nonPreemptible {
				continue
			}
			rg.evicted = c.epoch
			members := rg.byNodeAndName()
			lost := 0
			for _, m := range members {
				if s.nodes[m.node].Disrupted {
					lost++
				}
			}
			shrink := rg.minMember > 0 && len(members)-lost >= rg.minMember
			if shrink {
				c.lose(rg, lost)
			} else {
				c.lose(rg, len(members))
			}
			for _, m := range members {
				if shrink && !s.nodes[m.node].Disrupted {
					continue
				}
				a := m.a
				c.d.Evictions = append(c.d.Evictions, model.Eviction{Pod: a.Pod, Group: a.Group, Node: a.Node, Reason: model.EvictDisruption, Shrink: shrink})
			}
		}
	}
}
