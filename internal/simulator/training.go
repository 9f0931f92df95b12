package simulator

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// SizeShare is one bar of a job-size histogram: Share of the jobs run
// Pods pods.
type SizeShare struct {
	Pods  int
	Share float64
}

// PhillySizes is the job-size histogram of Microsoft's Philly cluster
// (Jeon et al., USENIX ATC 2019) as Gavel's trace generator draws it
// (Narayanan et al., OSDI 2020, scheduler/utils.py): 70% of jobs on one
// worker, 10% on two, 15% on four, 5% on eight. A training trace reads a
// worker as one pod holding a whole node (TrainingSpec).
var PhillySizes = []SizeShare{{1, 0.70}, {2, 0.10}, {4, 0.15}, {8, 0.05}}

// Bounds on a generated training workload.
const (
	maxTrainingJobs  = 1_000_000
	maxTrainingGang  = 4096
	maxSizeHistogram = 64
)

// ParseSizes parses a job-size histogram "PODS:WEIGHT,..." (weights are
// normalised), for example "1:70,2:10,4:15,8:5".
func ParseSizes(s string) ([]SizeShare, error) {
	var out []SizeShare
	var sum float64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ps, ws, ok := strings.Cut(part, ":")
		p, err1 := strconv.Atoi(ps)
		w, err2 := strconv.ParseFloat(ws, 64)
		if !ok || err1 != nil || err2 != nil || p < 1 || p > maxTrainingGang || !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%q: want PODS:WEIGHT with PODS in 1..%d and WEIGHT > 0", part, maxTrainingGang)
		}
		if len(out) == maxSizeHistogram {
			return nil, fmt.Errorf("at most %d sizes", maxSizeHistogram)
		}
		out = append(out, SizeShare{p, w})
		sum += w
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no sizes", s)
	}
	for i := range out {
		out[i].Share /= sum
	}
	return out, nil
}

// TrainingSpec is a multi-node training workload added to a trace whose
// nodes are laid out in racks (Layout, or the trace's own RackLabel):
// Jobs jobs whose sizes in pods follow Sizes, each pod holding every GPU of
// one node of the trace's most common largest machine (its model and GPU
// count; half its CPU and memory), so a job of k pods spans k nodes.
// Jobs of two pods or more are gangs placed by the network, with levels
// block, rack and node: RequiredShare of them, drawn at random among those
// one empty rack can hold, require a rack; the others prefer one.
// Run times follow Philly's as Gavel draws them (80% 10^U(1.5,3) minutes,
// 20% 10^U(3,4) minutes); arrivals are a Poisson process from Start
// (trace seconds; negative: the trace's first arrival), at the rate that
// offers Load times the GPU capacity of the machines the jobs use.
type TrainingSpec struct {
	Start         int64
	Jobs          int
	Sizes         []SizeShare
	RequiredShare float64
	Load          float64
	Seed          uint64
}

// TrainingTopology is the gang topology of a generated training job.
func TrainingTopology(required bool) *model.GangTopology {
	t := &model.GangTopology{Name: "training", Levels: []string{BlockLabel, RackLabel, hostnameLabel}}
	if required {
		t.Required = RackLabel
	} else {
		t.Preferred = RackLabel
	}
	return t
}

// AddTraining appends spec's jobs to tr's pods (in creation order) and
// returns how many gangs it made.
func AddTraining(tr *Trace, spec TrainingSpec) (int, error) {
	switch {
	case spec.Jobs < 1 || spec.Jobs > maxTrainingJobs:
		return 0, fmt.Errorf("training: jobs must be 1 to %d, got %d", maxTrainingJobs, spec.Jobs)
	case len(spec.Sizes) == 0:
		return 0, fmt.Errorf("training: no job sizes")
	case spec.RequiredShare < 0 || spec.RequiredShare > 1:
		return 0, fmt.Errorf("training: the share of gangs that require a rack must be in [0,1], got %g", spec.RequiredShare)
	case !(spec.Load > 0) || spec.Load > 100:
		return 0, fmt.Errorf("training: load must be in (0,100], got %g", spec.Load)
	}
	// The machine: the largest GPU count, then the most nodes of one
	// model, then the model's name.
	type shape struct {
		model string
		gpus  int
	}
	count := map[shape]int{}
	minCPU, minMem := map[shape]int64{}, map[shape]int64{}
	rackSize := map[string]int{}
	for i := range tr.Nodes {
		n := &tr.Nodes[i]
		if len(n.GPUs) == 0 {
			continue
		}
		sh := shape{n.GPUs[0].Model, len(n.GPUs)}
		if count[sh] == 0 || n.MilliCPU < minCPU[sh] {
			minCPU[sh] = n.MilliCPU
		}
		if count[sh] == 0 || n.MemoryMiB < minMem[sh] {
			minMem[sh] = n.MemoryMiB
		}
		count[sh]++
	}
	if len(count) == 0 {
		return 0, fmt.Errorf("training: the trace has no GPU node")
	}
	var shapes []shape
	for sh := range count {
		shapes = append(shapes, sh)
	}
	best := slices.MaxFunc(shapes, func(a, b shape) int {
		return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(count[a], count[b]), cmp.Compare(b.model, a.model))
	})
	for i := range tr.Nodes {
		n := &tr.Nodes[i]
		if len(n.GPUs) > 0 && len(n.GPUs) == best.gpus && n.GPUs[0].Model == best.model {
			if r := domainOf(n, RackLabel); r != "" {
				rackSize[domainOf(n, BlockLabel)+"/"+r]++
			}
		}
	}
	if len(rackSize) == 0 {
		return 0, fmt.Errorf("training: no %s node has a %s label: lay the nodes out in racks first (--layout)", best.model, RackLabel)
	}
	maxRack := 0
	for _, k := range rackSize {
		maxRack = max(maxRack, k)
	}
	req := model.Request{MilliCPU: minCPU[best] / 2, MemoryMiB: minMem[best] / 2, GPUs: best.gpus, GPUModels: []string{best.model}}

	rng := rand.New(rand.NewPCG(spec.Seed, 0x7a1))
	type job struct {
		size     int
		duration int64
		required bool
	}
	jobs := make([]job, spec.Jobs)
	var work float64 // GPU-seconds
	for i := range jobs {
		u, size := rng.Float64(), spec.Sizes[len(spec.Sizes)-1].Pods
		for _, s := range spec.Sizes {
			if u < s.Share {
				size = s.Pods
				break
			}
			u -= s.Share
		}
		minutes := math.Pow(10, 1.5+1.5*rng.Float64())
		if rng.Float64() >= 0.8 {
			minutes = math.Pow(10, 3+rng.Float64())
		}
		jobs[i] = job{size: size, duration: int64(math.Round(60 * minutes))}
		jobs[i].required = size > 1 && size <= maxRack && rng.Float64() < spec.RequiredShare
		work += float64(size*best.gpus) * float64(jobs[i].duration)
	}
	if int64(spec.Jobs)*int64(slices.MaxFunc(spec.Sizes, func(a, b SizeShare) int { return cmp.Compare(a.Pods, b.Pods) }).Pods) > int64(MaxTracePods-len(tr.Pods)) {
		return 0, fmt.Errorf("training: the trace would have more than %d pods", MaxTracePods)
	}
	capacity := float64(count[best] * best.gpus)
	meanGap := work / (capacity * spec.Load) / float64(spec.Jobs)
	at := spec.Start
	if at < 0 {
		at = math.MaxInt64
		for _, p := range tr.Pods {
			at = min(at, p.CreatedAt)
		}
		if at == math.MaxInt64 {
			at = 0
		}
	}
	t := float64(at)
	gangs := 0
	for i, j := range jobs {
		t += rng.ExpFloat64() * meanGap
		name := fmt.Sprintf("train-%05d", i)
		var topo *model.GangTopology
		if j.size > 1 {
			topo = TrainingTopology(j.required)
			gangs++
		}
		for k := range j.size {
			tp := TracePod{Name: name, Request: req, CreatedAt: int64(t), Duration: j.duration}
			if j.size > 1 {
				tp.Name = fmt.Sprintf("%s-%d", name, k)
				tp.Group, tp.MinMember, tp.Topology = name, j.size, topo
			}
			tr.Pods = append(tr.Pods, tp)
		}
	}
	sortByCreation(tr.Pods)
	tr.Source += fmt.Sprintf(" + %d training jobs on %s x%d", spec.Jobs, best.model, best.gpus)
	return gangs, nil
}
