package model

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// MIG layouts that follow demand. A node that opts in (its gpuplane.io/
// mig-layout-policy label) carries a NodeMIG; the core proposes layouts
// for its idle GPUs in Decisions.Layouts, and the node reports them
// applied. A proposal is a gpunode.MIGProposalGPU, the same record the
// scheduler writes on the Node and the agent reads: its At is in
// Snapshot.Now's unit here (Unix milliseconds for the Kubernetes adapter,
// trace seconds for the simulator).

// MIGProfile is one MIG profile the GPUs of an opted-in node offer, as far
// as proposing a layout needs it.
type MIGProfile struct {
	// Name is the GPU instance profile ("1g.10gb"), as pods ask for it
	// (nvidia.com/mig-1g.10gb).
	Name string `json:"name"`
	// Slices is the compute slices of one instance; Instances how many
	// instances of it one GPU holds at most.
	Slices    int `json:"slices"`
	Instances int `json:"instances"`
}

// NodeMIG is what the core knows of a node whose MIG layouts follow
// demand. A node without one is never proposed for.
type NodeMIG struct {
	// Profiles are the MIG profiles the node's GPUs offer (one GPU model
	// per node).
	Profiles []MIGProfile `json:"profiles"`
	// Proposals are the layouts last proposed for the node's GPUs, at
	// most one per GPU, in index order.
	Proposals []gpunode.MIGProposalGPU `json:"proposals,omitempty"`
	// Pending lists the GPUs whose proposal the node has not reported
	// applied yet.
	Pending []int `json:"pending,omitempty"`
}

// Profile returns the node's profile of that name.
func (m *NodeMIG) Profile(name string) (MIGProfile, bool) {
	for _, p := range m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// Proposal returns the node's last proposal for GPU index.
func (m *NodeMIG) Proposal(index int) (*gpunode.MIGProposalGPU, bool) {
	for i := range m.Proposals {
		if m.Proposals[i].Index == index {
			return &m.Proposals[i], true
		}
	}
	return nil, false
}

// LayoutPolicy is the hysteresis of layout proposals, in Snapshot.Now's
// unit: the core proposes only for demand that waited MinWait, never for
// a GPU proposed for less than Dwell ago, at most MaxPerNode GPUs of one
// node per cycle, and nothing for a node while one of its proposals is
// pending (not reported applied) and younger than Timeout.
type LayoutPolicy struct {
	MinWait int64 `json:"minWait,omitempty"`
	Dwell   int64 `json:"dwell,omitempty"`
	// Timeout 0: a pending proposal holds its node until reported.
	Timeout int64 `json:"timeout,omitempty"`
	// MaxPerNode 0 means 1.
	MaxPerNode int `json:"maxPerNode,omitempty"`
}

// LayoutProposal is a new MIG layout for one GPU of an opted-in node,
// proposed because pending pods need what the GPU, idle, does not offer.
type LayoutProposal struct {
	Node      string `json:"node"`
	NodeIndex int    `json:"nodeIndex"`
	gpunode.MIGProposalGPU
	// For names the pending groups whose demand it serves.
	For []string `json:"for,omitempty"`
}

// ProfileSlices is the compute slices of a MIG device profile: 3 for
// "3g.40gb", 1 for "1c.3g.40gb"; 0 when the name is not a profile.
func ProfileSlices(name string) int {
	head, _, _ := strings.Cut(name, ".")
	n, err := strconv.Atoi(strings.TrimRight(head, "cg"))
	if err != nil || n < 1 || n > gpunode.MaxMIGSlices || !strings.HasSuffix(head, "c") && !strings.HasSuffix(head, "g") {
		return 0
	}
	return n
}

// recordLayouts notes d's proposals on their nodes as pending: the GPU
// serves nothing new until the node reports the layout (CompleteLayouts).
// Nodes and GPUs are copied before they change: the core keeps the
// slices of the snapshots it saw.
func recordLayouts(snap *Snapshot, ls []LayoutProposal) {
	if len(ls) == 0 {
		return
	}
	snap.Nodes = slices.Clone(snap.Nodes)
	for _, l := range ls {
		if l.NodeIndex < 0 || l.NodeIndex >= len(snap.Nodes) || snap.Nodes[l.NodeIndex].Name != l.Node || snap.Nodes[l.NodeIndex].MIG == nil {
			continue
		}
		n := &snap.Nodes[l.NodeIndex]
		m := *n.MIG
		m.Proposals = slices.DeleteFunc(slices.Clone(m.Proposals), func(p gpunode.MIGProposalGPU) bool { return p.Index == l.Index })
		m.Proposals = append(m.Proposals, l.MIGProposalGPU)
		slices.SortFunc(m.Proposals, func(a, b gpunode.MIGProposalGPU) int { return a.Index - b.Index })
		if !slices.Contains(m.Pending, l.Index) {
			m.Pending = append(slices.Clone(m.Pending), l.Index)
		}
		n.MIG = &m
		n.GPUs = slices.Clone(n.GPUs)
		for g := range n.GPUs {
			if n.GPUs[g].Index == l.Index {
				n.GPUs[g].Repartitioning = true
			}
		}
	}
}

// CompleteLayouts has every node report the pending proposals made at or
// before until as applied: their GPUs take the proposed layout and serve
// again. A driver that models the time a node takes to re-partition (the
// simulator) calls it with now less that time; Apply leaves proposals
// pending. It returns how many GPUs changed.
func CompleteLayouts(snap *Snapshot, until int64) int {
	done := 0
	cloned := false
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if n.MIG == nil || len(n.MIG.Pending) == 0 {
			continue
		}
		var ready []*gpunode.MIGProposalGPU
		for _, g := range n.MIG.Pending {
			if p, ok := n.MIG.Proposal(g); ok && p.At <= until {
				ready = append(ready, p)
			}
		}
		if len(ready) == 0 {
			continue
		}
		if !cloned {
			snap.Nodes = slices.Clone(snap.Nodes)
			n = &snap.Nodes[i]
			cloned = true
		}
		m := *n.MIG
		n.GPUs = slices.Clone(n.GPUs)
		for _, p := range ready {
			m.Pending = slices.DeleteFunc(slices.Clone(m.Pending), func(g int) bool { return g == p.Index })
			for g := range n.GPUs {
				if n.GPUs[g].Index == p.Index {
					n.GPUs[g] = withLayout(n.GPUs[g], p)
					done++
				}
			}
		}
		n.MIG = &m
	}
	return done
}

// withLayout is g in the layout p: whole when MIG is off; else its MIG
// slices, all of one size when every device has the same.
func withLayout(g GPU, p *gpunode.MIGProposalGPU) GPU {
	g.Repartitioning = false
	g.MIGSlices, g.MIGInstanceSlices = 0, 0
	if !p.MIG {
		return g
	}
	size := -1
	for name, n := range p.Devices {
		s := ProfileSlices(name)
		g.MIGSlices += n * s
		switch {
		case size == -1:
			size = s
		case size != s:
			size = 0
		}
	}
	g.MIGSlices = min(g.MIGSlices, gpunode.MaxMIGSlices)
	g.MIGInstanceSlices = max(size, 0)
	g.SharesOnly, g.WholeOnly, g.ShareResource, g.MinShareMilli = false, false, "", 0
	return g
}
