package scheduler

import (
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// demand is what the waiting pods of one kind ask for and no GPU served
// this cycle: instances of one MIG profile, or whole GPUs.
type demand struct {
	profile string
	// req is the first such pod's request: where a new layout would let
	// it run.
	req  *model.Request
	need int
	// units names, per instance or GPU asked for, its group, in queue
	// order; next is the first one no proposal serves yet.
	units []string
	next  int
}

// serve takes n units off the demand and returns their groups.
func (w *demand) serve(n int) []string {
	var out []string
	end := min(w.next+n, len(w.units))
	for _, g := range w.units[w.next:end] {
		if len(out) == 0 || out[len(out)-1] != g {
			out = append(out, g)
		}
	}
	w.next = end
	w.need -= n
	return out
}

// proposeLayouts proposes new MIG layouts for idle GPUs of the nodes that
// opt in (model.Node.MIG): for the MIG instances that the groups this
// cycle left pending for want of room (UnplacedNoFit) ask for, idle whole
// GPUs become all instances of the profile; for the whole GPUs they ask
// for, idle MIG GPUs are turned whole. Only GPUs with nothing on them
// (nothing running or bound, no room held for a preemptor) are chosen, so
// a proposal never needs an eviction. Hysteresis (model.LayoutPolicy):
// demand must have waited MinWait; a GPU proposed for within Dwell is left
// alone; at most MaxPerNode GPUs of a node per cycle; a node with a
// proposal still pending (younger than Timeout) gets none, and what
// pending proposals will offer counts against the demand, so that demand
// is met once, not once per cycle.
func (c *cycle) proposeLayouts() {
	// Demand comes only from groups left pending for want of room
	// (layoutDemand): without one there is nothing to propose, and the
	// nodes, thousands of them, need not be read.
	if !c.anyNoFit() || !anyMIG(c.snap.Nodes) {
		return
	}
	snap := c.snap
	pol := snap.Layouts
	perNode := max(pol.MaxPerNode, 1)
	want := c.layoutDemand()
	if len(want) == 0 {
		return
	}
	byProfile := map[string]*demand{}
	for _, w := range want {
		byProfile[w.profile] = w
	}
	// 1. What pending proposals will offer is demand met already; their
	//    nodes wait for them.
	busy := make([]bool, len(snap.Nodes))
	for i := range snap.Nodes {
		m := snap.Nodes[i].MIG
		if m == nil {
			continue
		}
		for _, g := range m.Pending {
			p, ok := m.Proposal(g)
			if !ok || pol.Timeout > 0 && snap.Now-p.At >= pol.Timeout {
				continue
			}
			busy[i] = true
			if !p.MIG {
				if w := byProfile[""]; w != nil {
					w.serve(1)
				}
				continue
			}
			for name, n := range p.Devices {
				if w := byProfile[name]; w != nil {
					w.serve(n)
				}
			}
		}
	}
	// 2. Room held for preemptors waiting for their victims is not idle.
	held := map[[2]int]bool{}
	for _, h := range c.d.Holds {
		for _, b := range h.Plan {
			for _, sh := range b.GPUs {
				held[[2]int{b.NodeIndex, sh.Index}] = true
			}
		}
	}
	// 3. Idle GPUs, node by node, highest index first: low indexes stay
	//    whole together for NVLink gangs.
	count := make([]int, len(snap.Nodes))
	chosen := map[[2]int]bool{}
	for _, w := range want {
		for i := range snap.Nodes {
			n := &snap.Nodes[i]
			if w.need <= 0 {
				break
			}
			if n.MIG == nil || busy[i] || count[i] >= perNode || !c.s.st.Hosts(i, w.req) {
				continue
			}
			var prof model.MIGProfile
			if w.profile != "" {
				var ok bool
				if prof, ok = n.MIG.Profile(w.profile); !ok || prof.Instances < 1 {
					continue
				}
			}
			for g := len(n.GPUs) - 1; g >= 0 && w.need > 0 && count[i] < perNode; g-- {
				gp := &n.GPUs[g]
				if (w.profile == "") == (gp.MIGSlices == 0) || gp.Withdrawn || gp.Repartitioning || gp.ClaimOnly ||
					!placement.ModelAllowed(w.req, gp) || c.s.st.Nodes[i].GPUUsed(g) || held[[2]int{i, g}] || chosen[[2]int{i, g}] {
					continue
				}
				if last, ok := n.MIG.Proposal(gp.Index); ok && snap.Now-last.At < pol.Dwell {
					continue
				}
				p := gpunode.MIGProposalGPU{Index: gp.Index, At: snap.Now}
				units := 1
				if w.profile != "" {
					p.MIG, p.Devices = true, map[string]int{prof.Name: prof.Instances}
					units = prof.Instances
				}
				chosen[[2]int{i, g}] = true
				count[i]++
				c.d.Layouts = append(c.d.Layouts, model.LayoutProposal{Node: n.Name, NodeIndex: i, MIGProposalGPU: p, For: w.serve(units)})
			}
		}
	}
}

// anyNoFit reports whether the cycle left a group pending for want of
// room.
func (c *cycle) anyNoFit() bool {
	for i := range c.d.Unplaced {
		if c.d.Unplaced[i].Code == model.UnplacedNoFit {
			return true
		}
	}
	return false
}

// anyMIG reports whether a node's MIG layouts follow demand.
func anyMIG(nodes []model.Node) bool {
	for i := range nodes {
		if nodes[i].MIG != nil {
			return true
		}
	}
	return false
}

// layoutDemand gathers, in queue order, the MIG instances by profile and
// the whole GPUs that the groups left pending for want of room ask for,
// counting only groups that waited the policy's MinWait and requests
// through the device plugin (a ResourceClaim's devices are its driver's).
// The whole-GPU demand has profile "".
func (c *cycle) layoutDemand() []*demand {
	noFit := map[string]bool{}
	for _, u := range c.d.Unplaced {
		if u.Code == model.UnplacedNoFit {
			noFit[u.Group] = true
		}
	}
	var out []*demand
	idx := map[string]*demand{}
	for _, qs := range c.queues {
		for _, p := range qs {
			if p.placed || !noFit[p.g.Name] || c.snap.Now-p.g.CreatedAt < c.snap.Layouts.MinWait {
				continue
			}
			for k := range p.g.Pods {
				r := &p.g.Pods[k].Request
				var profile string
				n := 0
				switch {
				case r.DeviceSet != "" || len(r.FirstOf) > 0:
					continue
				case r.MIGSlices > 0 && r.MIGProfile != "":
					profile, n = r.MIGProfile, 1
				case r.GPUs > 0:
					n = r.GPUs
				default:
					continue
				}
				w := idx[profile]
				if w == nil {
					w = &demand{profile: profile, req: r}
					idx[profile] = w
					out = append(out, w)
				}
				w.need += n
				for range n {
					w.units = append(w.units, p.g.Name)
				}
			}
		}
	}
	return out
}
