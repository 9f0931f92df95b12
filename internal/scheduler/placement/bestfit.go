package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// BestFit prefers the node left with the least free CPU and GPU after the
// placement (each as a fraction of the node's capacity, averaged), and among
// a node's GPUs the one left with the least free share. Scale: -1..0.
type BestFit struct{}

var _ NodeLocal = (*BestFit)(nil)

// NewBestFit returns the best-fit plugin.
func NewBestFit() *BestFit { return &BestFit{} }

// Name implements Scorer.
func (*BestFit) Name() string { return "bestfit" }

// NodeLocal implements NodeLocal.
func (*BestFit) NodeLocal() {}

// Score implements Scorer.
func (*BestFit) Score(s *State, req *model.Request, o *Option) float64 {
	ns := &s.Nodes[o.Node]
	left := ratio(ns.FreeCPU-req.MilliCPU, ns.Node.MilliCPU)
	if c := ns.CapMilli(); c > 0 {
		left = (left + ratio(ns.FreeMilli()-req.GPUMilliTotal(), c)) / 2
	}
	if req.Shared() && len(o.Shares) == 1 {
		g := o.Shares[0].Index
		left += 1e-3 * ratio(ns.GPUFree[g]-o.Shares[0].Milli, ns.Node.GPUs[g].Capacity())
	}
	return -left
}
