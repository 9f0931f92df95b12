package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// GPUPacking fills GPUs that are already in use before touching idle ones:
// a share goes to a partly used GPU (score 2), else to a node with some GPU
// in use (1), else to an idle node (0); whole GPUs go to nodes with some GPU
// in use (1) before idle nodes (0). Within a tier it prefers the fuller
// node (a fraction added, below 1).
type GPUPacking struct{}

var _ NodeLocal = (*GPUPacking)(nil)

// NewGPUPacking returns the GPU packing plugin.
func NewGPUPacking() *GPUPacking { return &GPUPacking{} }

// Name implements Scorer.
func (*GPUPacking) Name() string { return "gpupacking" }

// NodeLocal implements NodeLocal.
func (*GPUPacking) NodeLocal() {}

// Score implements Scorer.
func (*GPUPacking) Score(s *State, req *model.Request, o *Option) float64 {
	ns := &s.Nodes[o.Node]
	used := 0
	for g := range ns.GPUFree {
		if ns.GPUUsed(g) {
			used++
		}
	}
	c := ns.CapMilli()
	frac := 0.999 * (1 - ratio(ns.FreeMilli(), c))
	switch {
	case req.Shared() && len(o.Shares) == 1 && ns.GPUUsed(o.Shares[0].Index):
		return 2 + frac
	case used > 0:
		return 1 + frac
	}
	return frac
}
