package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Target is one pod type of the workload FGD measures fragmentation
// against, with its share of the workload (P sums to 1).
type Target struct {
	Req model.Request
	P   float64
}

// TargetsFrom groups requests into pod types (CPU, whole GPUs, GPU share,
// GPU memory, MIG slices, allowed models; host memory is ignored, as in the
// FGD paper) and keeps the most popular types until they cover popularity
// (0..1] of the pods; the kept shares are renormalised to sum to 1.
func TargetsFrom(reqs []model.Request, popularity float64) ([]Target, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("building fgd targets: empty workload")
	}
	if popularity <= 0 || popularity > 1 {
		return nil, fmt.Errorf("building fgd targets: popularity must be in (0,1], got %g", popularity)
	}
	type entry struct {
		req   model.Request
		count int
		first int
	}
	byKey := map[string]*entry{}
	for i := range reqs {
		r := reqs[i]
		k := fmt.Sprintf("%d/%d/%d/%d/%d/%d/%s/%s/%s", r.MilliCPU, r.GPUs, r.GPUMilli, r.Replicas, r.GPUMemoryMiB, r.MIGSlices, r.ShareResource, strings.Join(r.GPUModels, "|"), r.DeviceSet)
		e := byKey[k]
		if e == nil {
			r.MemoryMiB = 0
			r.NodeSelector, r.Tolerations = nil, nil
			e = &entry{req: r, first: i}
			byKey[k] = e
		}
		e.count++
	}
	all := make([]*entry, 0, len(byKey))
	for _, e := range byKey {
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b *entry) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return cmp.Compare(a.first, b.first)
	})
	var kept []Target
	covered := 0
	for _, e := range all {
		kept = append(kept, Target{Req: e.req, P: float64(e.count)})
		covered += e.count
		if float64(covered) >= popularity*float64(len(reqs)) {
			break
		}
	}
	for i := range kept {
		kept[i].P /= float64(covered)
	}
	return kept, nil
}

// FGD is fragmentation gradient descent: it prefers the option that grows
// the node's expected GPU fragmentation least, where a node's fragmentation
// for a pod type is the free milli-GPU that type cannot use there (all of
// it when the type does not fit the node at all, otherwise the free part of
// each GPU too small for it), weighted by the type's share of the workload.
// Scale: minus the increase in milli-GPU.
type FGD struct {
	targets []Target
	scratch []int64
}

var _ NodeLocal = (*FGD)(nil)

// NewFGD returns the FGD plugin for a target workload.
func NewFGD(targets []Target) (*FGD, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("fgd: no target pod types")
	}
	sum := 0.0
	for i, t := range targets {
		if t.P < 0 {
			return nil, fmt.Errorf("fgd: target %d: share must be >= 0, got %g", i, t.P)
		}
		sum += t.P
	}
	if sum <= 0 {
		return nil, fmt.Errorf("fgd: target shares sum to %g, want > 0", sum)
	}
	ts := slices.Clone(targets)
	for i := range ts {
		ts[i].P /= sum
	}
	return &FGD{targets: ts}, nil
}

// Name implements Scorer.
func (*FGD) Name() string { return "fgd" }

// NodeLocal implements NodeLocal.
func (*FGD) NodeLocal() {}

// Score implements Scorer.
func (f *FGD) Score(s *State, req *model.Request, o *Option) float64 {
	ns := &s.Nodes[o.Node]
	before := f.NodeFrag(ns.Node, ns.FreeCPU, ns.GPUFree)
	after := append(f.scratch[:0], ns.GPUFree...)
	for _, sh := range o.Shares {
		after[sh.Index] -= sh.Milli
	}
	f.scratch = after
	return before - f.NodeFrag(ns.Node, ns.FreeCPU-req.MilliCPU, after)
}

// NodeFrag is a node's expected fragmentation in milli-GPU given its free
// CPU and per-GPU free milli.
func (f *FGD) NodeFrag(n *model.Node, freeCPU int64, free []int64) float64 {
	var total int64
	for g := range free {
		if n.GPUs[g].MIGSlices == 0 {
			total += free[g]
		}
	}
	if total == 0 {
		return 0
	}
	out := 0.0
	for i := range f.targets {
		out += f.targets[i].P * float64(fragFor(n, freeCPU, free, total, &f.targets[i].Req))
	}
	return out
}

func fragFor(n *model.Node, freeCPU int64, free []int64, total int64, t *model.Request) int64 {
	if !t.UsesGPU() || t.MIGSlices > 0 || freeCPU < t.MilliCPU {
		return total
	}
	k := max(t.GPUs, 1)
	if t.Replicas > 0 && t.GPUs > 0 && n.InReplicasOn(t) {
		k = 1 // replicas of one GPU
	}
	var frag int64
	fit := 0
	for g := range free {
		gp := &n.GPUs[g]
		if gp.MIGSlices > 0 {
			continue
		}
		need := gp.ShareMilli(t)
		if t.GPUs > 0 && !gp.InReplicas(t) {
			need = gp.Capacity()
		}
		if !serves(t, gp) || free[g] < need {
			frag += free[g]
		} else {
			fit++
		}
	}
	if fit < k {
		return total
	}
	return frag
}
