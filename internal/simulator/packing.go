package simulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// PackingConfig is one packing-mode run.
type PackingConfig struct {
	Policy string
	Seed   uint64
	// Tune is the arrived demand to tune the trace to, as a multiple of the
	// cluster's GPU capacity (the FGD paper uses 1.3); 0 keeps the trace.
	Tune float64
	// TunedLast appends the drawn pods after the trace instead of before
	// it (see Tune).
	TunedLast bool
	// KeepNodeOrder places on nodes in trace order. By default the node
	// order is permuted with the seed, as the FGD paper's simulator does
	// (it renames nodes with a random prefix), so that ties between equal
	// nodes break differently per seed.
	KeepNodeOrder bool
	// Popularity is the share of pods whose types FGD measures
	// fragmentation against (0 means 1: every type).
	Popularity float64
	// CurveStep is the arrived-demand step between curve points (0 means
	// 0.01 of capacity).
	CurveStep float64
	// Progress, if set, is called with the pods done and the total.
	Progress func(done, total int)
}

// Point is the cluster after pods worth ArrivedDemand (a fraction of GPU
// capacity) have arrived.
type Point struct {
	ArrivedDemand           float64 `json:"arrivedDemand"`
	MilliGPUAllocationRatio float64 `json:"milliGpuAllocationRatio"`
	GPUAllocationRatio      float64 `json:"gpuAllocationRatio"`
	Fragmentation           float64 `json:"fragmentation"`
	FailedPods              int     `json:"failedPods"`
}

// Result is the outcome of one (policy, seed) run.
type Result struct {
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	Seed   uint64 `json:"seed"`
	Pods   int    `json:"pods"`
	// FailedPods fit nowhere when they arrived (packing) or never ran
	// (event mode).
	FailedPods int `json:"failedPods"`
	// MilliGPUAllocationRatio is allocated milli-GPU over total milli-GPU
	// at the end; GPUAllocationRatio is GPUs with any allocation over all
	// GPUs; Fragmentation is the expected fragmentation (FGD's measure
	// against the run's workload) over total milli-GPU.
	MilliGPUAllocationRatio float64     `json:"milliGpuAllocationRatio"`
	GPUAllocationRatio      float64     `json:"gpuAllocationRatio"`
	Fragmentation           float64     `json:"fragmentation"`
	ArrivedDemand           float64     `json:"arrivedDemand"`
	WallSeconds             float64     `json:"wallSeconds"`
	Curve                   []Point     `json:"curve,omitempty"`
	Event                   *EventStats `json:"event,omitempty"`
	// TopologyPolicy is who placed gangs by the network (event mode), and
	// Topology where the gangs with a topology landed.
	TopologyPolicy string         `json:"topologyPolicy,omitempty"`
	Topology       *TopologyStats `json:"topology,omitempty"`
}

// RunPacking runs the FGD paper's experiment: the (tuned) pods arrive in
// creation order, each is placed once by the policy or fails, none leaves.
func RunPacking(ctx context.Context, tr *Trace, cfg PackingConfig) (*Result, error) {
	start := time.Now()
	capMilli := tr.GPUCapacityMilli()
	if len(tr.Nodes) == 0 {
		return nil, fmt.Errorf("packing %s: the trace has no nodes", tr.Source)
	}
	pods, err := Tune(tr.Pods, capMilli, cfg.Tune, cfg.Seed, !cfg.TunedLast)
	if err != nil {
		return nil, err
	}
	reqs := make([]model.Request, len(pods))
	for i := range pods {
		reqs[i] = pods[i].Request
	}
	pop := cfg.Popularity
	if pop == 0 {
		pop = 1
	}
	env := placement.PolicyEnv{Seed: cfg.Seed, Capacity: model.CapacityOf(tr.Nodes)}
	var meter *placement.FGD
	if len(reqs) > 0 {
		if env.Targets, err = placement.TargetsFrom(reqs, pop); err != nil {
			return nil, fmt.Errorf("packing %s: %w", tr.Source, err)
		}
		all, err := placement.TargetsFrom(reqs, 1)
		if err != nil {
			return nil, fmt.Errorf("packing %s: %w", tr.Source, err)
		}
		if meter, err = placement.NewFGD(all); err != nil {
			return nil, fmt.Errorf("packing %s: %w", tr.Source, err)
		}
	}
	pol, err := placement.NewPolicy(cfg.Policy, env)
	if err != nil {
		return nil, err
	}
	nodes := tr.Nodes
	if !cfg.KeepNodeOrder {
		nodes = slices.Clone(tr.Nodes)
		rng := rand.New(rand.NewPCG(cfg.Seed, 0x0de5))
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	}
	st := placement.NewState(nodes)
	pl, err := placement.NewPlacer(st, pol)
	if err != nil {
		return nil, err
	}
	step := cfg.CurveStep
	if step <= 0 {
		step = 0.01
	}
	res := &Result{Mode: "packing", Policy: cfg.Policy, Seed: cfg.Seed, Pods: len(pods)}
	nodeFrag := make([]float64, len(st.Nodes))
	var frag float64
	if meter != nil {
		for i := range st.Nodes {
			ns := &st.Nodes[i]
			nodeFrag[i] = meter.NodeFrag(ns.Node, ns.FreeCPU, ns.GPUFree)
			frag += nodeFrag[i]
		}
	}
	_, _, _, gpus := st.MilliTotals()
	var alloc, arrived int64
	used := 0
	next := step
	point := func() Point {
		return Point{
			ArrivedDemand:           ratio(arrived, capMilli),
			MilliGPUAllocationRatio: ratio(alloc, capMilli),
			GPUAllocationRatio:      ratio(int64(used), int64(gpus)),
			Fragmentation:           frag / float64(max(capMilli, 1)),
			FailedPods:              res.FailedPods,
		}
	}
	for k := range pods {
		if k%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("packing %s: %w", tr.Source, err)
			}
			if cfg.Progress != nil {
				cfg.Progress(k, len(pods))
			}
		}
		req := &pods[k].Request
		arrived += req.GPUMilliTotal()
		if o, ok := pl.Place(req); ok {
			ns := &st.Nodes[o.Node]
			for _, sh := range o.Shares {
				if !ns.GPUUsed(sh.Index) {
					used++
				}
				alloc += sh.Milli
			}
			if err := st.Assign(o.Node, req, o.Shares); err != nil {
				return nil, fmt.Errorf("packing %s: pod %s: %w", tr.Source, pods[k].Name, err)
			}
			if meter != nil {
				frag -= nodeFrag[o.Node]
				nodeFrag[o.Node] = meter.NodeFrag(ns.Node, ns.FreeCPU, ns.GPUFree)
				frag += nodeFrag[o.Node]
			}
		} else {
			res.FailedPods++
		}
		for capMilli > 0 && ratio(arrived, capMilli) >= next {
			res.Curve = append(res.Curve, point())
			next += step
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(len(pods), len(pods))
	}
	end := point()
	res.Curve = append(res.Curve, end)
	res.MilliGPUAllocationRatio = end.MilliGPUAllocationRatio
	res.GPUAllocationRatio = end.GPUAllocationRatio
	res.Fragmentation = end.Fragmentation
	res.ArrivedDemand = end.ArrivedDemand
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
