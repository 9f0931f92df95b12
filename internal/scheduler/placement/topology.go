package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// Topology prefers multi-GPU sets with strong links: the weakest link in
// the chosen set over the strongest possible link score (NVLink beats any
// PCIe path), plus 0.1 when all chosen GPUs share a NUMA node. Single-GPU
// and CPU-only options score 0. Scale 0..1.1.
type Topology struct{}

var _ NodeLocal = (*Topology)(nil)

// NewTopology returns the topology plugin.
func NewTopology() *Topology { return &Topology{} }

// Name implements Scorer.
func (*Topology) Name() string { return "topology" }

// NodeLocal implements NodeLocal.
func (*Topology) NodeLocal() {}

// Score implements Scorer.
func (*Topology) Score(s *State, _ *model.Request, o *Option) float64 {
	if len(o.Shares) < 2 {
		return 0
	}
	n := s.Nodes[o.Node].Node
	set := make([]int, len(o.Shares))
	for i, sh := range o.Shares {
		set[i] = sh.Index
	}
	score := 0.0
	if n.Topology != nil {
		mn, _ := linkStats(n, set)
		score = float64(mn) / 118 // NV18 is the strongest link we know of
	}
	numa := n.GPUs[set[0]].NUMANode
	same := true
	for _, g := range set[1:] {
		same = same && n.GPUs[g].NUMANode == numa
	}
	if same {
		score += 0.1
	}
	return score
}
