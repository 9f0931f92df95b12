package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// FirstFit takes the first node (lowest index) that fits: every option
// scores 0 and ties go to the lowest node index.
type FirstFit struct{}

var _ NodeLocal = (*FirstFit)(nil)

// NewFirstFit returns the first-fit plugin.
func NewFirstFit() *FirstFit { return &FirstFit{} }

// Name implements Scorer.
func (*FirstFit) Name() string { return "firstfit" }

// NodeLocal implements NodeLocal.
func (*FirstFit) NodeLocal() {}

// Score implements Scorer.
func (*FirstFit) Score(*State, *model.Request, *Option) float64 { return 0 }
