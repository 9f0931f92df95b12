package placement

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// PolicyEnv is what some plugins need to be built: FGD and gpuplane need
// the target workload, gpuplane the cluster's capacity too, random needs a
// seed.
type PolicyEnv struct {
	Targets []Target
	// Capacity is the cluster's total CPU, memory and GPU; zero when
	// unknown.
	Capacity model.Resources
	Seed     uint64
}

// DefaultPolicy is the policy the scheduler and the simulator use unless
// told otherwise: FGD with GPU packing as its tie-breaker (fgdpacking.go).
const DefaultPolicy = "fgd-packing"

// legacyDefaultPolicy is the default policy's earlier name, still accepted
// so that configs and scripts that name it keep working.
const legacyDefaultPolicy = "gpuplane"

// PolicyNames lists the built-in policies, in the order reports show them.
func PolicyNames() []string {
	return []string{DefaultPolicy, "fgd", "bestfit", "gpupacking", "gpuclustering", "dotproduct", "random", "firstfit", "spread", "topology"}
}

// NewPolicy builds a policy by name. Besides the built-in names (each the
// plugin of that name alone, and DefaultPolicy, which "gpuplane", its
// earlier name, also selects) it accepts a weighted mix,
// "custom:fgd=1,bestfit=0.01".
func NewPolicy(spec string, env PolicyEnv) (Policy, error) {
	if rest, ok := strings.CutPrefix(spec, "custom:"); ok {
		p := Policy{Name: spec}
		for part := range strings.SplitSeq(rest, ",") {
			name, ws, ok := strings.Cut(part, "=")
			if !ok {
				return Policy{}, fmt.Errorf("policy %q: %q: want plugin=weight", spec, part)
			}
			w, err := strconv.ParseFloat(ws, 64)
			if err != nil || w < 0 {
				return Policy{}, fmt.Errorf("policy %q: %s: weight must be a number >= 0, got %q", spec, name, ws)
			}
			s, err := newPlugin(name, env)
			if err != nil {
				return Policy{}, fmt.Errorf("policy %q: %w", spec, err)
			}
			p.Scorers = append(p.Scorers, Weighted{s, w})
		}
		return p, p.Validate()
	}
	if spec == DefaultPolicy || spec == legacyDefaultPolicy {
		return newFGDPacking(env)
	}
	s, err := newPlugin(spec, env)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Name: spec, Scorers: []Weighted{{s, 1}}}, nil
}

func newPlugin(name string, env PolicyEnv) (Scorer, error) {
	switch name {
	case "firstfit":
		return NewFirstFit(), nil
	case "bestfit":
		return NewBestFit(), nil
	case "gpupacking":
		return NewGPUPacking(), nil
	case "gpuclustering":
		return NewGPUClustering(), nil
	case "dotproduct":
		return NewDotProduct(), nil
	case "fgd":
		return NewFGD(env.Targets)
	case "random":
		return NewRandom(env.Seed), nil
	case "spread":
		return NewSpread(), nil
	case "topology":
		return NewTopology(), nil
	}
	return nil, fmt.Errorf("unknown placement plugin %q (want one of %s)", name, strings.Join(PolicyNames(), ", "))
}
