package mig

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// OverrideEntry is the Change.Entry of a change an override asks for.
const OverrideEntry = gpunode.MIGProposalAnnotation

// LayoutOfProposal turns a proposed layout into a Layout.
func LayoutOfProposal(p *gpunode.MIGProposalGPU) Layout {
	l := Layout{Enabled: p.MIG}
	if len(p.Devices) > 0 {
		l.Devices = make(map[string]int, len(p.Devices))
		for name, n := range p.Devices {
			l.Devices[name] = n
		}
	}
	return l
}

// Overrides reads a node's proposals (gpuplane.io/mig-proposal) as
// per-GPU layouts for Reconciler.Overrides.
func Overrides(p *gpunode.MIGProposal) map[int]Layout {
	if p == nil || len(p.GPUs) == 0 {
		return nil
	}
	out := make(map[int]Layout, len(p.GPUs))
	for i := range p.GPUs {
		out[p.GPUs[i].Index] = LayoutOfProposal(&p.GPUs[i])
	}
	return out
}

// unchangedPlan is the plan of a node with no config chosen: every GPU
// keeps its layout.
func unchangedPlan(gpus []GPU) *Plan {
	p := &Plan{Targets: make(map[int]Layout, len(gpus)), Changes: []Change{}, Unchanged: []int{}}
	for _, g := range gpus {
		p.Targets[g.Index] = g.Current
		p.Unchanged = append(p.Unchanged, g.Index)
	}
	return p
}

// withOverrides makes ov's layouts the targets of their GPUs in plan,
// over what the config chose: each is checked against its GPU's profiles
// first, and the error names the GPU. A GPU already in its override's
// layout is unchanged.
func withOverrides(plan *Plan, gpus []GPU, ov map[int]Layout) error {
	if len(ov) == 0 {
		return nil
	}
	idx := make([]int, 0, len(ov))
	for i := range ov {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		l := ov[i]
		path := fmt.Sprintf("%s: GPU %d", OverrideEntry, i)
		if i < 0 || i >= len(gpus) {
			return fmt.Errorf("%s: %w: the node has GPUs 0 to %d", path, ErrInvalid, len(gpus)-1)
		}
		g := &gpus[i]
		if l.Enabled && !g.Capable {
			return fmt.Errorf("%s: %w: %s cannot run MIG", path, ErrInvalid, g.Name)
		}
		insts, err := Fit(path, g.Profiles, l)
		if err != nil {
			return fmt.Errorf("GPU %d (%s): %w: %w", g.Index, g.Name, ErrInvalid, err)
		}
		plan.Targets[g.Index] = l
		plan.Changes = deleteChange(plan.Changes, g.Index)
		plan.Unchanged = deleteInt(plan.Unchanged, g.Index)
		plan.Unselected = deleteInt(plan.Unselected, g.Index)
		if g.Current.Equal(l) {
			plan.Unchanged = append(plan.Unchanged, g.Index)
			sort.Ints(plan.Unchanged)
			continue
		}
		plan.Changes = append(plan.Changes, Change{Index: g.Index, UUID: g.UUID, Name: g.Name, From: g.Current, To: l, Instances: insts, Entry: OverrideEntry})
	}
	sort.Slice(plan.Changes, func(a, b int) bool { return plan.Changes[a].Index < plan.Changes[b].Index })
	return nil
}

// holdBusyOverrides takes out of plan the changes an override alone asks
// for on GPUs that pods still hold: nothing is ever evicted for a
// proposal, so such a GPU keeps its layout until it is idle. It returns
// what waits, for the status.
func (r *Reconciler) holdBusyOverrides(ctx context.Context, plan *Plan) ([]string, error) {
	busy := map[int]bool{}
	for _, c := range plan.Changes {
		if c.Entry == OverrideEntry {
			busy[c.Index] = true
		}
	}
	if len(busy) == 0 {
		return nil, nil
	}
	pods, err := r.Cluster.PodsOn(ctx, busy)
	if err != nil {
		return nil, fmt.Errorf("finding the pods on GPUs %s: %w", indexList(keys(busy)), err)
	}
	holders := map[int][]string{}
	for _, p := range pods {
		for _, g := range p.GPUs {
			if busy[g] {
				holders[g] = append(holders[g], p.String())
			}
		}
	}
	var waiting []string
	keep := plan.Changes[:0]
	for _, c := range plan.Changes {
		if hs := holders[c.Index]; c.Entry == OverrideEntry && len(hs) > 0 {
			waiting = append(waiting, fmt.Sprintf("GPU %d: %s waits for %s to finish", c.Index, c.To, strings.Join(hs, ", ")))
			plan.Targets[c.Index] = c.From
			plan.Unchanged = append(plan.Unchanged, c.Index)
			continue
		}
		keep = append(keep, c)
	}
	plan.Changes = keep
	sort.Ints(plan.Unchanged)
	return waiting, nil
}

func overridden(ov map[int]Layout) map[int]bool {
	out := make(map[int]bool, len(ov))
	for i := range ov {
		out[i] = true
	}
	return out
}

func deleteChange(cs []Change, index int) []Change {
	out := cs[:0]
	for _, c := range cs {
		if c.Index != index {
			out = append(out, c)
		}
	}
	return out
}

func deleteInt(xs []int, x int) []int {
	out := xs[:0]
	for _, v := range xs {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}
