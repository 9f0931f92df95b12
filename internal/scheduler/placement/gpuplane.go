package placement

import (
	"fmt"
	"slices"
)

// newGPUPlane is our default policy. It is FGD with two changes, each
// measured on the openb traces (docs/benchmarks-scheduler.md):
//
//   - a pod type's weight in the expected fragmentation is its share of
//     pods times 1 + 2 x (its CPU per whole GPU over the workload's mean
//     CPU). On GPU nodes CPU often runs out before GPUs do, and the pods
//     that then fail are the CPU-heavy GPU pods, so free GPU next to too
//     little CPU is the fragmentation that costs most. Dividing by the GPU
//     count keeps big multi-GPU pods, which already need whole idle GPUs,
//     from dominating the measure (weighting by CPU alone wins on the
//     default trace but loses to FGD on the multigpu ones);
//   - among options of equal fragmentation increase, GPU packing keeps
//     idle GPUs and nodes idle (shares go to GPUs already in use).
//
// Topology only ranks multi-GPU sets of equal score.
func newGPUPlane(env PolicyEnv) (Policy, error) {
	ts := slices.Clone(env.Targets)
	var mean, total float64
	for _, t := range ts {
		mean += t.P * float64(t.Req.MilliCPU)
		total += t.P
	}
	if total > 0 {
		mean /= total
	}
	for i := range ts {
		r := &ts[i].Req
		ts[i].P *= 1 + 2*float64(r.MilliCPU)/max(mean, 1)/float64(max(r.GPUs, 1))
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
