package placement

import (
	"math/rand/v2"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Random scores every option with a seeded random number in [0,1), so the
// best option is a uniform pick among the feasible ones.
type Random struct{ rng *rand.Rand }

var _ Scorer = (*Random)(nil)

// NewRandom returns the random plugin seeded with seed.
func NewRandom(seed uint64) *Random {
	return &Random{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
}

// Name implements Scorer.
func (*Random) Name() string { return "random" }

// Score implements Scorer.
func (r *Random) Score(*State, *model.Request, *Option) float64 { return r.rng.Float64() }
