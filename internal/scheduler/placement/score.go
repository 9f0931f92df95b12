package placement

import (
	"fmt"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Scorer rates one placement option; higher is better. Scores of different
// plugins are combined as a weighted sum, so each documents its scale.
type Scorer interface {
	// Name is the plugin's name in policies and reports.
	Name() string
	// Score rates placing req as option o on the state s (before the
	// placement is applied).
	Score(s *State, req *model.Request, o *Option) float64
}

// NodeLocal is an optional capability of a Scorer: its score depends only
// on the node's static class, the node's free state, the request and the
// option's GPUs' free state; never on the node's identity, other nodes or
// randomness. Such scores are memoised by node signature.
type NodeLocal interface {
	Scorer
	// NodeLocal marks the scorer; it does nothing.
	NodeLocal()
}

// PodMixScorer is an optional capability of a NodeLocal scorer whose score
// also reads the node's pod mix (NodeState.ShareSizes); its memo key then
// includes the mix.
type PodMixScorer interface {
	NodeLocal
	// UsesPodMix marks the scorer; it does nothing.
	UsesPodMix()
}

// Weighted is a scorer with its weight in a policy.
type Weighted struct {
	Scorer
	Weight float64
}

// Policy is a named, ordered set of weighted scorers. Order only matters
// for reports: the sum is commutative, and ties between options go to the
// lowest node index, then the first option.
type Policy struct {
	Name    string
	Scorers []Weighted
}

func (p *Policy) usesPodMix() bool {
	for _, w := range p.Scorers {
		if _, ok := w.Scorer.(PodMixScorer); ok {
			return true
		}
	}
	return false
}

func (p *Policy) nodeLocal() bool {
	for _, w := range p.Scorers {
		if _, ok := w.Scorer.(NodeLocal); !ok {
			return false
		}
	}
	return true
}

// Validate checks the policy's weights.
func (p *Policy) Validate() error {
	if len(p.Scorers) == 0 {
		return fmt.Errorf("policy %q: no score plugins", p.Name)
	}
	for i, w := range p.Scorers {
		if w.Scorer == nil {
			return fmt.Errorf("policy %q: plugin %d is nil", p.Name, i)
		}
		if w.Weight < 0 {
			return fmt.Errorf("policy %q: plugin %s: weight must be >= 0, got %g", p.Name, w.Name(), w.Weight)
		}
	}
	return nil
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
