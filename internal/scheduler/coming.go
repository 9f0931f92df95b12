package scheduler

import (
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Coming nodes (model.Node.Coming) are nodes an autoscaler bought whose
// GPUs have yet to register. They take no pod until they have: a pod
// bound there now would wait on the node, or be refused by it, while the
// node's GPUs may never come. But a group that waits for room while room
// is on its way must not look as if it waited for capacity: an autoscaler
// would buy another node for it. awaitComing tells those groups apart.

// comingLimit bounds the coming nodes one cycle's what-if names in a
// group's reason.
const comingLimit = 8

// awaitComing finds, among the groups finish left waiting for capacity
// (unplaced, queue by queue, each queue's in its order), those that would fit
// were the coming nodes up, and records them as waiting for those nodes
// (model.UnplacedNodesComing) instead. The groups take the coming nodes'
// room in that order, each on top of the ones before, so a second group
// that needs a node of its own still waits for capacity and an autoscaler
// buys it one; the free room on other nodes counts too (a gang may start
// partly on a node that is up). Each group is tried by first fit, coming
// nodes first, with its pod constraints, and takes at least its Min()
// pods or nothing; a group with a topology is left as it is, since its
// domains decide where it may go. Everything is rolled back: the what-if
// binds nothing.
func (c *cycle) awaitComing(waiting []comingWait) {
	st := c.s.st
	coming := c.s.coming
	if len(coming) == 0 || len(waiting) == 0 {
		return
	}
	up := make([]int, 0, len(c.s.nodes)-len(coming))
	for i := range c.s.nodes {
		if !c.s.nodes[i].Coming || c.s.nodes[i].Disrupted {
			up = append(up, i)
		}
	}
	mark := st.Checkpoint()
	st.SetComingUp(true)
	defer func() {
		st.SetComingUp(false)
		st.Rollback(mark)
	}()
	for _, w := range waiting {
		u, p := &c.d.Unplaced[w.k], w.p
		if p.g.Topology != nil {
			continue
		}
		if !c.anyRoom(coming, p) {
			continue // the coming nodes have no room left for it: it waits for capacity
		}
		gm := st.Checkpoint()
		on := map[int]bool{}
		placed := 0
		for j := range p.g.Pods {
			if n, ok := c.firstFit(&p.g.Pods[j].Request, coming, up); ok {
				placed++
				if c.s.nodes[n].Coming {
					on[n] = true
				}
			}
		}
		if placed < p.g.Min() || len(on) == 0 {
			st.Rollback(gm)
			continue
		}
		u.Code, u.Wait, u.Coming = model.UnplacedNodesComing, waitFor(model.UnplacedNodesComing), nil
		for _, n := range coming {
			if on[n] {
				u.Coming = append(u.Coming, c.s.nodes[n].Name)
			}
		}
		u.Reason = comingReason(u.Coming)
		u.Explained, u.Nodes, u.Filtered, u.Placeable = false, 0, nil, 0
		u.Need, u.Capacity = model.Resources{}, model.Resources{}
	}
}

// comingWait is a group finish left waiting for capacity: its
// Decisions.Unplaced index and the group.
type comingWait struct {
	k int
	p *pending
}

// anyRoom reports whether one of the coming nodes has room for one of p's
// pods, as the what-if has left them.
func (c *cycle) anyRoom(coming []int, p *pending) bool {
	st := c.s.st
	for j := range p.g.Pods {
		req := &p.g.Pods[j].Request
		for _, n := range coming {
			for a := range max(len(req.FirstOf), 1) {
				if len(st.Options(n, req.Alt(a))) > 0 {
					return true
				}
			}
		}
	}
	return false
}

// firstFit assigns req (its first alternative that fits) to the first
// node of coming, then of up, with room for it, and returns the node.
func (c *cycle) firstFit(req *model.Request, coming, up []int) (int, bool) {
	st := c.s.st
	for _, nodes := range [][]int{coming, up} {
		for _, n := range nodes {
			for a := range max(len(req.FirstOf), 1) {
				r := req.Alt(a)
				if opts := st.Options(n, r); len(opts) > 0 && st.Assign(n, r, opts[0].Shares) == nil {
					return n, true
				}
			}
		}
	}
	return 0, false
}

// comingReason says in words which coming nodes a group waits for.
func comingReason(nodes []string) string {
	names := nodes
	more := ""
	if len(names) > comingLimit {
		names, more = names[:comingLimit], fmt.Sprintf(" and %d more", len(nodes)-comingLimit)
	}
	return fmt.Sprintf("waiting for %d node(s) to register their GPUs: %s%s; they have room for it once up", len(nodes), strings.Join(names, ", "), more)
}
