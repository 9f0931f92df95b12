package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// Spread prefers the node left with the most free CPU and GPU (the mirror
// of BestFit), for latency-sensitive work that should not share. Scale 0..1.
type Spread struct{}

var _ NodeLocal = (*Spread)(nil)

// NewSpread returns the spread plugin.
func NewSpread() *Spread { return &Spread{} }

// Name implements Scorer.
func (*Spread) Name() string { return "spread" }

// NodeLocal implements NodeLocal.
func (*Spread) NodeLocal() {}

// Score implements Scorer.
func (*Spread) Score(s *State, req *model.Request, o *Option) float64 {
	return -(&BestFit{}).Score(s, req, o)
}
