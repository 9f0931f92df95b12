package simulator

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Team is one tenant of the contended workload: a queue with a GPU
// guarantee that submits a share of the jobs, more of them in its bursts.
type Team struct {
	Name string
	// Guarantee is the team's guaranteed share of the cluster's GPUs
	// (its queue's Guaranteed and Weight).
	Guarantee float64
	// Demand is the team's share of the jobs submitted outside bursts.
	Demand float64
}

// DefaultTeams are four teams whose demand does not follow their
// guarantees: the two smaller teams ask for more than they are
// guaranteed, the largest for less.
func DefaultTeams() []Team {
	return []Team{
		{Name: "team-a", Guarantee: 0.4, Demand: 0.25},
		{Name: "team-b", Guarantee: 0.3, Demand: 0.3},
		{Name: "team-c", Guarantee: 0.2, Demand: 0.25},
		{Name: "team-d", Guarantee: 0.1, Demand: 0.2},
	}
}

// ContendedSpec describes a contended multi-tenant workload
// (GenerateContended).
type ContendedSpec struct {
	Seed uint64
	// Nodes is the cluster's size; machine types follow openb's mix.
	Nodes int
	// Hours is how long jobs arrive, from time 0.
	Hours int
	// Load is the offered load of the busiest hour: the GPU-time of the
	// jobs arriving in it over the cluster's GPU-time in an hour.
	Load  float64
	Teams []Team
	// BurstFactor multiplies a team's share of arrivals for BurstHours a
	// day, starting at an hour drawn for each team and day.
	BurstFactor float64
	BurstHours  int
	// MinRunTime and MaxRunTime clamp the run times drawn from Philly's
	// (seconds).
	MinRunTime, MaxRunTime int64
	// MaxGangShare bounds a job's GPUs, CPU, memory and RDMA, each as a
	// share of the cluster's.
	MaxGangShare float64
	// CheckpointShare of the jobs checkpoint, each every one of
	// CheckpointIntervals (seconds) drawn at random; the others never do.
	CheckpointShare     float64
	CheckpointIntervals []int64
	// MovableShare of the jobs that checkpoint opt in to moves for
	// defragmentation (TracePod.Movable): restartable from their last
	// checkpoint elsewhere. A job that never checkpoints never opts in.
	MovableShare float64
}

// DefaultContendedSpec is the workload docs/benchmarks-scheduler.md
// measures, with the given seed.
func DefaultContendedSpec(seed uint64) ContendedSpec {
	return ContendedSpec{
		Seed: seed, Nodes: 48, Hours: 24, Load: 1.5, Teams: DefaultTeams(),
		BurstFactor: 3, BurstHours: 4,
		MinRunTime: 60, MaxRunTime: 12 * 3600, MaxGangShare: 0.25,
		CheckpointShare: 0.6, CheckpointIntervals: []int64{600, 1800, 3600},
		MovableShare: 0.5,
	}
}

// Validate names the first field that is out of range.
func (s *ContendedSpec) Validate() error {
	switch {
	case s.Nodes < 1 || s.Nodes > MaxTraceNodes:
		return fmt.Errorf("nodes: want 1 to %d, got %d", MaxTraceNodes, s.Nodes)
	case s.Hours < 1 || s.Hours > 24*365:
		return fmt.Errorf("hours: want 1 to %d, got %d", 24*365, s.Hours)
	case !(s.Load > 0) || s.Load > 100:
		return fmt.Errorf("load: want more than 0 and at most 100, got %g", s.Load)
	case len(s.Teams) == 0:
		return errors.New("teams: none")
	case !(s.BurstFactor >= 1) || s.BurstFactor > 1000:
		return fmt.Errorf("burstFactor: want 1 to 1000, got %g", s.BurstFactor)
	case s.BurstHours < 0 || s.BurstHours > 24:
		return fmt.Errorf("burstHours: want 0 to 24, got %d", s.BurstHours)
	case s.MinRunTime < 1 || s.MaxRunTime < s.MinRunTime || s.MaxRunTime > maxRunTime:
		return fmt.Errorf("minRunTime, maxRunTime: want 1 <= min <= max <= %d, got %d and %d", maxRunTime, s.MinRunTime, s.MaxRunTime)
	case !(s.MaxGangShare > 0) || s.MaxGangShare > 1:
		return fmt.Errorf("maxGangShare: want more than 0 and at most 1, got %g", s.MaxGangShare)
	case !(s.CheckpointShare >= 0) || s.CheckpointShare > 1:
		return fmt.Errorf("checkpointShare: want 0 to 1, got %g", s.CheckpointShare)
	case !(s.MovableShare >= 0) || s.MovableShare > 1:
		return fmt.Errorf("movableShare: want 0 to 1, got %g", s.MovableShare)
	case s.CheckpointShare > 0 && len(s.CheckpointIntervals) == 0:
		return errors.New("checkpointIntervals: none, but checkpointShare > 0")
	}
	for i, c := range s.CheckpointIntervals {
		if c < 1 {
			return fmt.Errorf("checkpointIntervals[%d]: want >= 1 second, got %d", i, c)
		}
	}
	names := map[string]bool{}
	var g float64
	for i, t := range s.Teams {
		switch {
		case t.Name == "" || names[t.Name]:
			return fmt.Errorf("teams[%d].name: want a unique name, got %q", i, t.Name)
		case !(t.Guarantee >= 0) || t.Guarantee > 1:
			return fmt.Errorf("teams[%d].guarantee: want 0 to 1, got %g", i, t.Guarantee)
		case !(t.Demand > 0) || t.Demand > 1:
			return fmt.Errorf("teams[%d].demand: want more than 0 and at most 1, got %g", i, t.Demand)
		}
		names[t.Name] = true
		g += t.Guarantee
	}
	if g > 1+1e-9 {
		return fmt.Errorf("teams: guarantees add up to %g, more than the cluster", g)
	}
	return nil
}

// ParseTeams parses NAME:GUARANTEE:DEMAND,... (shares in [0,1]).
func ParseTeams(s string) ([]Team, error) {
	var out []Team
	for part := range strings.SplitSeq(s, ",") {
		f := strings.Split(strings.TrimSpace(part), ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("%q: want NAME:GUARANTEE:DEMAND", part)
		}
		g, err1 := strconv.ParseFloat(f[1], 64)
		d, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q: guarantee and demand must be numbers", part)
		}
		out = append(out, Team{Name: f[0], Guarantee: g, Demand: d})
	}
	return out, nil
}

// GenerateContended draws a contended multi-tenant workload from the
// tables (docs/simulator.md, "A contended workload"), the same for the
// same tables and spec:
//
//   - the cluster: spec.Nodes machines in openb's mix of machine types
//     (largest remainders), each with an RDMA NIC per 4 GPUs, one at least;
//   - one queue per team, guaranteed its share of GPUs, weighted by it,
//     with no limit (it may burst to the whole cluster);
//   - jobs: a batch shape of the Alibaba 2025 trace (GPU and CPU
//     members), the GPU members all of one openb GPU pod shape and one
//     RDMA share of the trace's GPU instances, the CPU members of the
//     trace's CPU-role shapes, all running one run time drawn from
//     Philly's quantiles (interpolated, clamped); a job of several pods is
//     a gang of all of them;
//   - arrivals: hour by hour, jobs are drawn, each for a team chosen by
//     its demand share (times BurstFactor within its burst), until their
//     GPU-time reaches Load x capacity x the hour's weight in the Alibaba
//     trace's daily profile (the busiest hour weighs 1), at uniform random
//     times within the hour;
//   - checkpoints: CheckpointShare of the jobs save their progress every
//     one of CheckpointIntervals; MovableShare of those opt in to moves.
//
// Shapes that fit no machine of the cluster are left out of the draw.
func GenerateContended(t *WorkloadTables, spec ContendedSpec) (*Trace, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("contended workload: %w", err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("contended workload: %w", err)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0xc0de))
	tr := &Trace{Source: fmt.Sprintf("contended (seed %d, %d nodes, %d h, peak load %g)", spec.Seed, spec.Nodes, spec.Hours, spec.Load)}
	tr.Nodes = contendedNodes(t.Nodes, spec.Nodes)
	capMilli := tr.GPUCapacityMilli()
	if capMilli == 0 {
		return nil, fmt.Errorf("contended workload: %d nodes of openb's mix have no GPU; ask for more", spec.Nodes)
	}
	for _, tm := range spec.Teams {
		g := int64(math.Round(tm.Guarantee * float64(capMilli)))
		w := tm.Guarantee
		if w == 0 {
			w = 1e-3
		}
		tr.Queues = append(tr.Queues, model.Queue{Name: tm.Name, Guaranteed: model.Resources{GPUMilli: g}, Weight: w})
	}
	fits := func(s *PodShape) bool {
		for i := range tr.Nodes {
			n := &tr.Nodes[i]
			need := max(s.GPUs, 1)
			if s.GPUMilliTotal() == 0 {
				need = 0
			}
			if n.MilliCPU >= s.MilliCPU && n.MemoryMiB >= s.MemoryMiB && len(n.GPUs) >= need && n.Allocatable[RDMAResource] >= s.RDMA {
				return true
			}
		}
		return false
	}
	gpuShapes := filterShapes(t.GPUPods, fits)
	cpuShapes := filterShapes(t.CPUPods, fits)
	if len(gpuShapes) == 0 {
		return nil, fmt.Errorf("contended workload: no GPU pod shape fits a machine of %d nodes", spec.Nodes)
	}
	gpuPick := newPicker(gpuShapes, func(s PodShape) int64 { return s.Count })
	cpuPick := newPicker(cpuShapes, func(s PodShape) int64 { return s.Count })
	rdmaPick := newPicker(t.GPURDMA, func(w Weighted) int64 { return w.Count })
	gangPick := newPicker(t.Gangs, func(g GangShape) int64 { return g.Count })
	var clusterRoom PodShape // the cluster's CPU, memory, milli-GPU (in GPUMilli) and RDMA
	for i := range tr.Nodes {
		n := &tr.Nodes[i]
		clusterRoom.MilliCPU += n.MilliCPU
		clusterRoom.MemoryMiB += n.MemoryMiB
		clusterRoom.RDMA += n.Allocatable[RDMAResource]
	}
	clusterRoom.GPUMilli = capMilli
	var peakHour int64
	for _, c := range t.ArrivalsByHour {
		peakHour = max(peakHour, c)
	}
	type job struct {
		gang            GangShape
		gpu, cpu        PodShape
		rdma            int64
		run, checkpoint int64
		movable         bool
	}
	draw := func() job {
		var j job
		for range 100 {
			j.gang = gangPick.pick(rng)
			if len(cpuShapes) == 0 {
				j.gang.CPUPods = 0
			}
			j.gpu = gpuPick.pick(rng)
			j.rdma = rdmaPick.pick(rng).Value
			if j.gang.CPUPods > 0 {
				j.cpu = cpuPick.pick(rng)
			}
			if withinShare(j.gang, &j.gpu, &j.cpu, j.rdma, clusterRoom, spec.MaxGangShare) && fitsEmpty(tr.Nodes, j.gang, &j.gpu, &j.cpu, j.rdma) {
				break
			}
			j.gang.GPUPods, j.gang.CPUPods, j.rdma = 1, 0, 0 // after 100 misses: one pod alone, no RDMA
		}
		j.run = min(max(quantileAt(t.RunTimes, rng.Float64()), spec.MinRunTime), spec.MaxRunTime)
		if rng.Float64() < spec.CheckpointShare {
			j.checkpoint = spec.CheckpointIntervals[rng.IntN(len(spec.CheckpointIntervals))]
			// Drawn only when MovableShare is set, so that a workload
			// without movable jobs draws as it did before they existed.
			j.movable = spec.MovableShare > 0 && rng.Float64() < spec.MovableShare
		}
		return j
	}
	// Each team's burst, per day: the hour it starts.
	days := (spec.Hours + 23) / 24
	burst := make([][]int, len(spec.Teams))
	for k := range burst {
		burst[k] = make([]int, days)
		for d := range days {
			burst[k][d] = rng.IntN(24 - spec.BurstHours + 1)
		}
	}
	capGPUSeconds := float64(capMilli) / model.MilliPerGPU * 3600
	weights := make([]float64, len(spec.Teams))
	seq := 0
	for h := range spec.Hours {
		target := spec.Load * capGPUSeconds * float64(t.ArrivalsByHour[h%24]) / float64(peakHour)
		for k, tm := range spec.Teams {
			weights[k] = tm.Demand
			if b := h%24 - burst[k][h/24]; b >= 0 && b < spec.BurstHours {
				weights[k] *= spec.BurstFactor
			}
		}
		var offered float64
		var hourPods []TracePod
		for offered < target {
			j := draw()
			gpuSeconds := float64(int64(j.gang.GPUPods)*j.gpu.GPUMilliTotal()) / model.MilliPerGPU * float64(j.run)
			if offered+gpuSeconds > target && target-offered < gpuSeconds/2 {
				break // the job would overshoot the hour more than leaving it out falls short
			}
			offered += gpuSeconds
			team := spec.Teams[pickWeight(rng, weights)].Name
			at := int64(h)*3600 + rng.Int64N(3600)
			seq++
			hourPods = append(hourPods, jobPods(team, seq, at, j.gang, j.gpu, j.cpu, j.rdma, j.run, j.checkpoint, j.movable)...)
		}
		tr.Pods = append(tr.Pods, hourPods...)
	}
	sortByCreation(tr.Pods)
	return tr, nil
}

// jobPods are one job's pods: gang members share the group, its run time,
// checkpoint interval and whether it may be moved.
func jobPods(team string, seq int, at int64, g GangShape, gpu, cpu PodShape, rdma, run, ckpt int64, movable bool) []TracePod {
	name := fmt.Sprintf("%s-j%05d", team, seq)
	n := g.GPUPods + g.CPUPods
	group := ""
	if n > 1 {
		group = name
	}
	pods := make([]TracePod, 0, n)
	add := func(suffix string, s PodShape, rd int64) {
		req := model.Request{MilliCPU: s.MilliCPU, MemoryMiB: s.MemoryMiB, GPUs: s.GPUs, GPUMilli: s.GPUMilli}
		if s.GPUs > 0 {
			req.GPUMilli = 0
		}
		if rd > 0 {
			req.Scalars = map[string]int64{RDMAResource: rd}
		}
		pn := name
		if n > 1 {
			pn = name + suffix
		}
		pods = append(pods, TracePod{Name: pn, Request: req, CreatedAt: at, Duration: run, Queue: team, Group: group,
			Priority: gpu.Priority, CheckpointEvery: ckpt, Movable: movable})
	}
	for i := range g.GPUPods {
		add(fmt.Sprintf("-gpu%d", i), gpu, rdma)
	}
	for i := range g.CPUPods {
		add(fmt.Sprintf("-cpu%d", i), cpu, cpu.RDMA)
	}
	return pods
}

// withinShare reports whether a job asks for at most share of the
// cluster's CPU, memory, GPUs and RDMA.
func withinShare(g GangShape, gpu, cpu *PodShape, rdma int64, cluster PodShape, share float64) bool {
	gp, cp := int64(g.GPUPods), int64(g.CPUPods)
	for _, r := range [][2]int64{
		{gp*gpu.MilliCPU + cp*cpu.MilliCPU, cluster.MilliCPU},
		{gp*gpu.MemoryMiB + cp*cpu.MemoryMiB, cluster.MemoryMiB},
		{gp * gpu.GPUMilliTotal(), cluster.GPUMilli},
		{gp*rdma + cp*cpu.RDMA, cluster.RDMA},
	} {
		if float64(r[0]) > share*float64(r[1]) {
			return false
		}
	}
	return true
}

// fitsEmpty reports whether a job's pods all fit the empty cluster at
// once, placed largest first on the first node with room (a sufficient
// test): a job that could never start is not drawn.
func fitsEmpty(nodes []model.Node, g GangShape, gpu, cpu *PodShape, rdma int64) bool {
	type room struct {
		cpu, mem, rdma int64
		gpus           []int64 // free milli per GPU
	}
	free := make([]room, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		free[i] = room{cpu: n.MilliCPU, mem: n.MemoryMiB, rdma: n.Allocatable[RDMAResource], gpus: make([]int64, len(n.GPUs))}
		for k := range free[i].gpus {
			free[i].gpus[k] = model.MilliPerGPU
		}
	}
	take := func(s *PodShape, rd int64) bool {
		for i := range free {
			f := &free[i]
			if f.cpu < s.MilliCPU || f.mem < s.MemoryMiB || f.rdma < rd {
				continue
			}
			var ks []int
			for k, m := range f.gpus {
				switch {
				case s.GPUs > 0 && m == model.MilliPerGPU && len(ks) < s.GPUs:
					ks = append(ks, k)
				case s.GPUs == 0 && s.GPUMilli > 0 && m >= s.GPUMilli && len(ks) == 0:
					ks = append(ks, k)
				}
			}
			if (s.GPUs > 0 && len(ks) < s.GPUs) || (s.GPUMilli > 0 && s.GPUs == 0 && len(ks) == 0) {
				continue
			}
			f.cpu, f.mem, f.rdma = f.cpu-s.MilliCPU, f.mem-s.MemoryMiB, f.rdma-rd
			use := s.GPUMilli
			if s.GPUs > 0 {
				use = model.MilliPerGPU
			}
			for _, k := range ks {
				f.gpus[k] -= use
			}
			return true
		}
		return false
	}
	for range g.GPUPods {
		if !take(gpu, rdma) {
			return false
		}
	}
	for range g.CPUPods {
		if !take(cpu, cpu.RDMA) {
			return false
		}
	}
	return true
}

// contendedNodes lays out n machines in the types' proportions by
// largest remainders, each with an RDMA NIC per 4 GPUs (one at least)
// and room for 110 pods.
func contendedNodes(types []NodeShape, n int) []model.Node {
	var total int64
	for _, t := range types {
		total += t.Count
	}
	exact := func(i int) float64 { return float64(n) * float64(types[i].Count) / float64(total) }
	frac := func(i int) float64 { return exact(i) - math.Floor(exact(i)) }
	counts := make([]int, len(types))
	rem := make([]int, len(types))
	given := 0
	for i := range types {
		counts[i] = int(exact(i))
		given += counts[i]
		rem[i] = i
	}
	slices.SortStableFunc(rem, func(a, b int) int {
		fa, fb := frac(a), frac(b)
		switch {
		case fa > fb:
			return -1
		case fa < fb:
			return 1
		}
		return 0
	})
	for k := 0; given < n; k++ {
		counts[rem[k%len(rem)]]++
		given++
	}
	var nodes []model.Node
	for i, t := range types {
		for range counts[i] {
			nd := model.Node{Name: fmt.Sprintf("node-%03d", len(nodes)), MilliCPU: t.MilliCPU, MemoryMiB: t.MemoryMiB,
				Allocatable: map[string]int64{model.ResourcePods: 110, RDMAResource: 100 * int64(max(1, (t.GPUs+3)/4))}}
			nd.Domains = map[string]string{hostnameLabel: nd.Name}
			for g := range t.GPUs {
				nd.GPUs = append(nd.GPUs, model.GPU{Index: g, Model: t.Model, Milli: model.MilliPerGPU})
			}
			nodes = append(nodes, nd)
		}
	}
	return nodes
}

func filterShapes(in []PodShape, keep func(*PodShape) bool) []PodShape {
	var out []PodShape
	for i := range in {
		if keep(&in[i]) {
			out = append(out, in[i])
		}
	}
	return out
}

// quantileAt is the value at probability u of evenly spaced quantiles q
// (q[0] the least, q[len-1] the largest), interpolated linearly.
func quantileAt(q []int64, u float64) int64 {
	x := u * float64(len(q)-1)
	i := int(x)
	if i >= len(q)-1 {
		return q[len(q)-1]
	}
	f := x - float64(i)
	return int64(math.Round(float64(q[i]) + f*float64(q[i+1]-q[i])))
}

// picker draws items in proportion to their counts.
type picker[T any] struct {
	items []T
	cum   []int64
}

func newPicker[T any](items []T, count func(T) int64) *picker[T] {
	p := &picker[T]{items: items, cum: make([]int64, len(items))}
	var c int64
	for i, it := range items {
		c += count(it)
		p.cum[i] = c
	}
	return p
}

func (p *picker[T]) pick(rng *rand.Rand) T {
	var zero T
	if len(p.items) == 0 || p.cum[len(p.cum)-1] <= 0 {
		return zero
	}
	x := rng.Int64N(p.cum[len(p.cum)-1])
	i, _ := slices.BinarySearch(p.cum, x+1)
	return p.items[i]
}

func pickWeight(rng *rand.Rand, w []float64) int {
	var s float64
	for _, v := range w {
		s += v
	}
	x := rng.Float64() * s
	for i, v := range w {
		if x < v {
			return i
		}
		x -= v
	}
	return len(w) - 1
}

// OfferedLoadByHour is, for each hour from 0, the GPU-time of the pods
// arriving in it over the cluster's GPU-time in an hour.
func OfferedLoadByHour(tr *Trace) []float64 {
	capGPUSeconds := float64(tr.GPUCapacityMilli()) / model.MilliPerGPU * 3600
	var out []float64
	for i := range tr.Pods {
		p := &tr.Pods[i]
		h := int(p.CreatedAt / 3600)
		for len(out) <= h {
			out = append(out, 0)
		}
		out[h] += float64(p.Request.GPUMilliTotal()) / model.MilliPerGPU * float64(p.RunTime()) / capGPUSeconds
	}
	return out
}
