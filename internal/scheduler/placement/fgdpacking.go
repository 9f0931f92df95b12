package placement

import (
	"fmt"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// newFGDPacking is the default policy, "fgd-packing": FGD with GPU packing as the
// tie-breaker, except where the target workload runs out of CPU before GPU
// (cpuPressure above 1: the workload's CPU per GPU over the cluster's),
// where it is FGD as published.
//
//   - GPU packing (weight 1e-3, so it decides only among options whose
//     expected fragmentation is within a hair) sends shares to GPUs already
//     in use and GPU-less pods beside busy GPUs, keeping idle GPUs and
//     nodes whole for the pods that need them.
//   - Under CPU pressure that packing strands the CPU the GPU pods need:
//     up to 1 point below FGD where CPU-only pods are 2.5 to 4 times as
//     many as traced. GPU fragmentation is then not what leaves pods
//     unplaced, so FGD's choice stands.
//
// The policy was chosen on a robustness set (docs/benchmarks-scheduler.md,
// "Workloads the trace did not show"): openb's ten variants and 21 mixes of
// `default` with each kind of pod scaled up and down, seeds 1-10 to choose
// and seeds 11-20 held out. Weighting FGD's pod types by their CPU per GPU
// (the previous form of this policy) won more on some openb variants but
// lost to FGD by 0.2 points on the held-out seeds wherever whole-GPU pods
// were twice as many as traced; without it no mix is below FGD by more
// than the seeds' noise (worst -0.02 over 20 seeds), and every openb
// variant is ahead.
//
// Topology only ranks multi-GPU sets of equal score. Without the cluster's
// capacity (PolicyEnv.Capacity zero) the pressure is taken as 1.
func newFGDPacking(env PolicyEnv) (Policy, error) {
	fgd, err := NewFGD(env.Targets)
	if err != nil {
		return Policy{}, fmt.Errorf("policy %s: %w", DefaultPolicy, err)
	}
	if cpuPressure(env) > 1 {
		return Policy{Name: DefaultPolicy, Scorers: []Weighted{{fgd, 1}, {NewTopology(), 1e-6}}}, nil
	}
	return Policy{Name: DefaultPolicy, Scorers: []Weighted{
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
