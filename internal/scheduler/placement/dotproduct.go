package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// DotProduct aligns the request with the node's free resources (Tetris):
// the dot product of the request and the free vector, both as fractions of
// the node's capacity, over CPU, memory and milli-GPU. Scale 0..3.
type DotProduct struct{}

var _ NodeLocal = (*DotProduct)(nil)

// NewDotProduct returns the dot-product plugin.
func NewDotProduct() *DotProduct { return &DotProduct{} }

// Name implements Scorer.
func (*DotProduct) Name() string { return "dotproduct" }

// NodeLocal implements NodeLocal.
func (*DotProduct) NodeLocal() {}

// Score implements Scorer.
func (*DotProduct) Score(s *State, req *model.Request, o *Option) float64 {
	ns := &s.Nodes[o.Node]
	n := ns.Node
	c := ns.CapMilli()
	return ratio(req.MilliCPU, n.MilliCPU)*ratio(ns.FreeCPU, n.MilliCPU) +
		ratio(req.MemoryMiB, n.MemoryMiB)*ratio(ns.FreeMem, n.MemoryMiB) +
		ratio(req.GPUMilliTotal(), c)*ratio(ns.FreeMilli(), c)
}
