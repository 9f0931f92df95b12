package placement

import (
	"fmt"
	"slices"
)

// newGPUPlane is our default policy. It is FGD with two changes, each
// measured on the openb trace (docs/benchmarks-scheduler.md):
//
//   - pod types are weighted by the CPU they ask for, not only by how often
//     they occur. On GPU nodes CPU runs out before GPUs do, and the pods
//     that then fail are the CPU-heavy GPU pods, so free GPU next to too
//     little CPU is the fragmentation that costs most;
//   - among options of equal fragmentation increase, GPU packing keeps
//     idle GPUs and nodes idle (shares go to GPUs already in use).
//
// Topology only ranks multi-GPU sets of equal score.
func newGPUPlane(env PolicyEnv) (Policy, error) {
	ts := slices.Clone(env.Targets)
	for i := range ts {
		ts[i].P *= float64(max(ts[i].Req.MilliCPU, 1))
	}
	fgd, err := NewFGD(ts)
	if err != nil {
		return Policy{}, fmt.Errorf("policy gpuplane: %w", err)
	}
	return Policy{Name: "gpuplane", Scorers: []Weighted{
		{fgd, 1},
		{NewGPUPacking(), 1e-3},
		{NewTopology(), 1e-6},
	}}, nil
}
