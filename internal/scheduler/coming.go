package scheduler

import (
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
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
// partly on a node that is up). Each group is placed as the cycle places
// it (place: its policy, its pod constraints, its topology), by a placer
// of the what-if's own, since the cycle's placer knows coming nodes as
// taking nothing. Everything is rolled back: the what-if binds nothing.
func (c *cycle) awaitComing(waiting []comingWait) {
	st := c.s.st
	coming := c.s.coming
	if len(coming) == 0 || len(waiting) == 0 {
		return
	}
	whatIf, err := placement.NewPlacer(st, c.s.policy)
	if err != nil {
		return // the policy made the cycle's placer; it cannot fail here
	}
	mark := st.Checkpoint()
	st.SetComingUp(true)
	placer := c.s.placer
	c.s.placer = whatIf
	defer func() {
		c.s.placer = placer
		st.SetComingUp(false)
		st.Rollback(mark)
	}()
	isComing := make(map[int]bool, len(coming))
	for _, n := range coming {
		isComing[n] = true
	}
	for _, w := range waiting {
		u, p := &c.d.Unplaced[w.k], w.p
		if !c.anyRoom(coming, p) {
			continue // the coming nodes have no room left for it: it waits for capacity
		}
		gm := st.Checkpoint()
		binds, ok := c.place(p, nil)
		if !ok {
			continue
		}
		on := map[int]bool{}
		for _, b := range binds {
			if isComing[b.NodeIndex] {
				on[b.NodeIndex] = true
			}
		}
		if len(on) == 0 {
			// It fits on nodes that are up: what keeps it waiting is not
			// the coming nodes' room.
			st.Rollback(gm)
			continue
		}
		u.Code, u.Wait, u.Coming, u.Kept = model.UnplacedNodesComing, waitFor(model.UnplacedNodesComing), nil, nil
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

// comingReason says in words which coming nodes a group waits for.
func comingReason(nodes []string) string {
	names := nodes
	more := ""
	if len(names) > comingLimit {
		names, more = names[:comingLimit], fmt.Sprintf(" and %d more", len(nodes)-comingLimit)
	}
	return fmt.Sprintf("waiting for %d node(s) to register their GPUs: %s%s; they have room for it once up", len(nodes), strings.Join(names, ", "), more)
}
