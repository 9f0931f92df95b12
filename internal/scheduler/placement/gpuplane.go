package placement

import (
	"fmt"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// newGPUPlane is our default policy. It is FGD, changed by how hard the
// target workload presses on the cluster's CPU against its GPUs
// (cpuPressure: the workload's CPU per GPU over the cluster's), each change
// measured on the openb traces and on reshaped mixes of them
// (docs/benchmarks-scheduler.md):
//
//   - where the workload runs out of CPU before GPU (pressure above 1) it
//     is FGD as published: GPU fragmentation is then not what leaves pods
//     unplaced, and packing GPU-less pods beside busy GPUs strands the CPU
//     the GPU pods need (up to 1 point below FGD without this, where
//     CPU-only pods are 2.5 to 4 times as many as traced);
//   - otherwise a pod type's weight in the expected fragmentation is its
//     share of pods times 1 + 2 x pressure x (its CPU per whole GPU over
//     the workload's mean CPU). On GPU nodes the pods that fail first are
//     the CPU-heavy GPU pods, so free GPU beside too little CPU is the
//     fragmentation that costs most, the more so the nearer CPU is to
//     running out; dividing by the GPU count keeps big multi-GPU pods,
//     which need whole idle GPUs anyway, from dominating the measure;
//   - among options of equal fragmentation increase, GPU packing keeps
//     idle GPUs and nodes idle (shares go to GPUs already in use, GPU-less
//     pods beside busy GPUs).
//
// Topology only ranks multi-GPU sets of equal score. Without the cluster's
// capacity (PolicyEnv.Capacity zero) the pressure is taken as 1.
func newGPUPlane(env PolicyEnv) (Policy, error) {
	pressure := cpuPressure(env)
	if pressure > 1 {
		fgd, err := NewFGD(env.Targets)
		if err != nil {
			return Policy{}, fmt.Errorf("policy gpuplane: %w", err)
		}
		return Policy{Name: "gpuplane", Scorers: []Weighted{{fgd, 1}, {NewTopology(), 1e-6}}}, nil
	}
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
		ts[i].P *= 1 + 2*pressure*float64(r.MilliCPU)/max(mean, 1)/float64(max(r.GPUs, 1))
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

// cpuPressure is how much harder the target workload presses on the
// cluster's CPU than on its GPUs: the workload's milli-CPU per milli-GPU
// (over the targets' shares) over the cluster's. Above 1 the workload runs
// out of CPU before it runs out of GPU. It is 1 when the capacity is
// unknown and 0 when the workload asks for no CPU or no GPU.
func cpuPressure(env PolicyEnv) float64 {
	c := env.Capacity
	if c.MilliCPU <= 0 || c.GPUMilli <= 0 {
		return 1
	}
	var cpu, gpu float64
	for _, t := range env.Targets {
		cpu += t.P * float64(t.Req.MilliCPU)
		gpu += t.P * float64(int64(t.Req.GPUs)*model.MilliPerGPU+t.Req.GPUMilli)
	}
	if cpu <= 0 || gpu <= 0 {
		return 0
	}
	return (cpu / gpu) / (float64(c.MilliCPU) / float64(c.GPUMilli))
}
