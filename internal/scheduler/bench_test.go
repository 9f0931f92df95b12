package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

func benchCycle(b *testing.B, pending []model.PodGroup) {
	nodes := schedtest.Cluster("n", 5000, 8, 128000, 1<<20)
	snap := model.Snapshot{Nodes: nodes, Pending: pending}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	// The first cycle builds the scheduler's state; later snapshots of the
	// same cluster are applied incrementally, which is what we measure.
	warm := model.Snapshot{Nodes: nodes, Pending: pending[:1]}
	if _, err := s.Cycle(&warm); err != nil {
		b.Fatal(err)
	}
	binds := 0
	b.ResetTimer()
	for b.Loop() {
		d, err := s.Cycle(&snap)
		if err != nil {
			b.Fatal(err)
		}
		binds = len(d.Binds)
	}
	b.ReportMetric(float64(binds), "binds/cycle")
}

// BenchmarkCycle10kPods: 5,000 nodes x 8 GPUs, 10,000 pending 1-GPU pods.
func BenchmarkCycle10kPods(b *testing.B) {
	var pending []model.PodGroup
	for i := range 10000 {
		pending = append(pending, schedtest.Group(fmt.Sprintf("p%d", i)).Queue("default").Created(int64(i)).Pods(1, schedtest.GPU(1, 4000)).Obj())
	}
	benchCycle(b, pending)
}

// BenchmarkCycle1kGangs: 5,000 nodes x 8 GPUs, 1,000 pending 8-pod gangs.
func BenchmarkCycle1kGangs(b *testing.B) {
	var pending []model.PodGroup
	for i := range 1000 {
		pending = append(pending, schedtest.Group(fmt.Sprintf("g%d", i)).Created(int64(i)).Pods(8, schedtest.GPU(1, 4000)).Obj())
	}
	benchCycle(b, pending)
}

// BenchmarkCyclePreempt: 1,000 nodes x 8 GPUs full of low-priority 1-GPU
// pods, 200 pending high-priority 1-GPU pods of the same queue, each of
// which must preempt one victim.
func BenchmarkCyclePreempt(b *testing.B) { benchPreempt(b, false) }

// BenchmarkCyclePreemptPolicies: BenchmarkCyclePreempt with the policies
// over time on: the queue has a usage half-life and a minimum runtime
// every victim has passed, half the victims report a checkpoint, so the
// victims are ordered by the work they lose at Now.
func BenchmarkCyclePreemptPolicies(b *testing.B) { benchPreempt(b, true) }

func benchPreempt(b *testing.B, policies bool) {
	nodes := schedtest.Cluster("n", 1000, 8, 128000, 1<<20)
	var low []model.PodGroup
	for i := range 8000 {
		low = append(low, schedtest.Group(fmt.Sprintf("low%d", i)).Created(int64(i)).Pods(1, schedtest.GPU(1, 4000)).Obj())
	}
	base := model.Snapshot{Nodes: nodes, Pending: low, Budget: model.DisruptionBudget{MaxEvictions: -1}}
	h, err := schedtest.NewHarness(base, scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Cycle(); err != nil {
		b.Fatal(err)
	}
	snap := h.Snap
	if policies {
		snap.Now = 100
		snap.Queues = []model.Queue{{Name: "default", UsageHalfLife: 3600, MinRuntime: 10}}
		run := schedtest.Running(&snap)
		for i := range run {
			if i%2 == 0 {
				run[i].LastCheckpoint = int64(50 + i%40)
			}
		}
		snap.RunningByNode = schedtest.OnNodes(nodes, run...)
	}
	for i := range 200 {
		snap.Pending = append(snap.Pending, schedtest.Group(fmt.Sprintf("high%d", i)).Priority(10).Created(int64(10000+i)).Pods(1, schedtest.GPU(1, 4000)).Obj())
	}
	warm := snap
	warm.Pending = nil
	evictions := 0
	b.ResetTimer()
	for b.Loop() {
		// A fresh scheduler synced to the full cluster, outside the
		// timing: the measured cycle decides the evictions.
		b.StopTimer()
		s, err := scheduler.New(scheduler.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Cycle(&warm); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d, err := s.Cycle(&snap)
		if err != nil {
			b.Fatal(err)
		}
		evictions = len(d.Evictions)
	}
	b.ReportMetric(float64(evictions), "evictions/cycle")
}

// benchQueues are three equal queues under no parent.
var benchQueues = []model.Queue{{Name: "a"}, {Name: "b"}, {Name: "c"}}

// fullChunks returns, per node, perNode single-GPU pods on GPUs
// 0..perNode-1, spread over the bench queues round-robin with priority
// prio(i) for the i-th pod.
func fullChunks(nodes []model.Node, perNode int, prio func(i int) int32) [][]model.Allocation {
	chunks := make([][]model.Allocation, len(nodes))
	i := 0
	for n := range nodes {
		for g := range perNode {
			chunks[n] = append(chunks[n], model.Allocation{Pod: fmt.Sprintf("r%d", i), Group: fmt.Sprintf("r%d", i),
				Queue: benchQueues[i%3].Name, Priority: prio(i), Node: nodes[n].Name, Request: schedtest.GPU(1, 4000),
				GPUs: []model.GPUShare{{Index: g, Milli: model.MilliPerGPU}}, StartedAt: int64(i)})
			i++
		}
	}
	return chunks
}

// steadyDriver plays the cluster between cycles: it carries out the last
// cycle's binds, ends churn random pods and queues churn new single-GPU
// pods. A node's chunk is replaced by a new slice only when it changes.
type steadyDriver struct {
	snap   model.Snapshot
	chunks [][]model.Allocation
	rng    *rand.Rand
	churn  int
	next   int
	// req is the request of the n-th new pod; nil: one GPU.
	req func(n int) model.Request
	// gang, when set, makes the n-th new arrival a gang of size pods with
	// topology t where it returns a topology; waiting groups are pending
	// in every cycle.
	gang    func(n int) (size int, t *model.GangTopology)
	waiting []model.PodGroup
	// policies turns on the queues' usage half-life and minimum runtime
	// (runSteady) and moves Now with each step.
	policies bool
}

func (d *steadyDriver) step(dec model.Decisions) {
	queueOf := map[string]string{}
	for _, g := range d.snap.Pending {
		queueOf[g.Name] = g.Queue
	}
	reqOf := map[string]model.Request{}
	for _, g := range d.snap.Pending {
		for _, p := range g.Pods {
			reqOf[p.Name] = p.Request
		}
	}
	for _, b := range dec.Binds {
		c := d.chunks[b.NodeIndex]
		d.chunks[b.NodeIndex] = append(c[:len(c):len(c)], model.Allocation{Pod: b.Pod, Group: b.Group, Queue: queueOf[b.Group],
			Node: b.Node, Request: reqOf[b.Pod], GPUs: b.GPUs, StartedAt: int64(d.next)})
	}
	for range d.churn {
		n := d.rng.IntN(len(d.chunks))
		c := d.chunks[n]
		if len(c) == 0 {
			continue
		}
		k := d.rng.IntN(len(c))
		d.chunks[n] = append(c[:k:k], c[k+1:]...)
	}
	d.snap.Pending = d.snap.Pending[:0]
	for range d.churn {
		d.next++
		name := fmt.Sprintf("new%d", d.next)
		req := schedtest.GPU(1, 4000)
		if d.req != nil {
			req = d.req(d.next)
		}
		if d.gang != nil {
			if size, t := d.gang(d.next); t != nil {
				d.snap.Pending = append(d.snap.Pending, schedtest.Group(name).Queue(benchQueues[d.next%3].Name).Created(int64(d.next)).Topology(*t).Pods(size, req).Obj())
				continue
			}
		}
		d.snap.Pending = append(d.snap.Pending, schedtest.Group(name).Queue(benchQueues[d.next%3].Name).Created(int64(d.next)).Pods(1, req).Obj())
	}
	d.snap.Pending = append(d.snap.Pending, d.waiting...)
	d.snap.RunningByNode = slices.Clone(d.chunks)
	if d.policies {
		d.snap.Now = int64(d.next)
		d.snap.Usage = dec.Usage
	}
}

// BenchmarkCycleSteady: 5,000 nodes x 8 GPUs running 35,000 single-GPU
// pods; between cycles churn pods end and as many new ones arrive. The
// driver hands the core the same chunk for every node nothing changed on.
func BenchmarkCycleSteady(b *testing.B) {
	for _, tc := range []struct {
		name  string
		churn int
		// policies: the queues count usage over time and protect young
		// groups, and the clock moves every cycle.
		policies bool
	}{{"churn=0", 0, false}, {"churn=100", 100, false}, {"churn=100-policies", 100, true}} {
		b.Run(tc.name, func(b *testing.B) {
			nodes := schedtest.Cluster("n", 5000, 8, 128000, 1<<20)
			d := &steadyDriver{chunks: fullChunks(nodes, 7, func(int) int32 { return 0 }), rng: rand.New(rand.NewPCG(1, 2)), churn: tc.churn,
				next: 35000, policies: tc.policies}
			runSteady(b, d, nodes)
		})
	}
}

// BenchmarkCycleBacklog: 1,000 nodes x 8 GPUs full of single-GPU pods of
// three equal queues at their fair share (priorities 2 to 4), and 2,000
// pending groups of those queues (priorities 0 to 2) that can neither fit
// nor preempt nor reclaim.
func BenchmarkCycleBacklog(b *testing.B) {
	nodes := schedtest.Cluster("n", 1000, 8, 128000, 1<<20)
	chunks := fullChunks(nodes, 8, func(i int) int32 { return int32(2 + i%5%3) })
	snap := model.Snapshot{Nodes: nodes, Queues: benchQueues, Budget: model.DisruptionBudget{MaxEvictions: -1}}
	snap.RunningByNode = slices.Clone(chunks)
	for i := range 2000 {
		snap.Pending = append(snap.Pending, schedtest.Group(fmt.Sprintf("p%d", i)).Queue(benchQueues[i%3].Name).Priority(int32(i%7%3)).
			Created(int64(i)).Pods(1+i%2, schedtest.GPU(1, 4000)).Obj())
	}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var d model.Decisions
	b.ResetTimer()
	for b.Loop() {
		if d, err = s.Cycle(&snap); err != nil {
			b.Fatal(err)
		}
	}
	if len(d.Binds)+len(d.Evictions) != 0 || len(d.Unplaced) != 2000 {
		b.Fatalf("%d binds, %d evictions, %d unplaced: want 0, 0 and 2000", len(d.Binds), len(d.Evictions), len(d.Unplaced))
	}
}

// BenchmarkCycleSteadyConstrained: BenchmarkCycleSteady's churn=100 at
// 20,000 nodes in 10 zones, running 140,000 pods of 200 services (one pod
// in 100 carries required anti-affinity per node against its service),
// where one new pod in ten carries required anti-affinity per node or a
// zone spread constraint (maxSkew 1) against its service.
func BenchmarkCycleSteadyConstrained(b *testing.B) {
	const nodeCount, services = 20000, 200
	nodes := schedtest.Cluster("n", nodeCount, 8, 128000, 1<<20)
	for i := range nodes {
		nodes[i].Labels = map[string]string{hostKey: nodes[i].Name, zoneKey: fmt.Sprintf("z%d", i%10)}
	}
	svc := func(n int) model.Request {
		r := schedtest.GPU(1, 4000)
		r.Namespace = "ns"
		r.Labels = map[string]string{"app": fmt.Sprintf("svc-%d", n%services)}
		return r
	}
	anti := func(r model.Request) model.Request {
		r.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{{Selector: &model.LabelSelector{MatchLabels: r.Labels}, Namespaces: []string{"ns"}, TopologyKey: hostKey}}}
		return r
	}
	chunks := fullChunks(nodes, 7, func(int) int32 { return 0 })
	k := 0
	for n := range chunks {
		for j := range chunks[n] {
			r := svc(k)
			if k%100 == 0 {
				r = anti(r)
			}
			chunks[n][j].Request = r
			k++
		}
	}
	d := &steadyDriver{chunks: chunks, rng: rand.New(rand.NewPCG(1, 2)), churn: 100, next: 7 * nodeCount, req: func(n int) model.Request {
		r := svc(n)
		switch n % 20 {
		case 0:
			return anti(r)
		case 10:
			r.Spread = []model.SpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey, Selector: &model.LabelSelector{MatchLabels: r.Labels}}}
		}
		return r
	}}
	runSteady(b, d, nodes)
}

// BenchmarkCycleSteadyTopology: BenchmarkCycleSteady's churn=100 at
// 20,000 nodes laid out in four levels (4 zones x 10 blocks x 25 racks x
// 20 hosts), where one new arrival in ten is a gang of four single-GPU
// pods with a topology (a required rack; a required block preferring a
// rack; a preferred rack; a required block in slices of two per rack), and
// 16 gangs of four 8-GPU pods that require a rack or a block wait in every
// cycle: each cycle tries their domains, ranks the closest one and looks
// for movable pods in it.
func BenchmarkCycleSteadyTopology(b *testing.B) {
	nodes := schedtest.TopologyCluster(4, 10, 25, 20, 8)
	lv := schedtest.TopologyLevels
	shapes := []model.GangTopology{
		{Levels: lv, Required: schedtest.RackKey},
		{Levels: lv, Required: schedtest.BlockKey, Preferred: schedtest.RackKey},
		{Levels: lv, Preferred: schedtest.RackKey},
		{Levels: lv, Required: schedtest.BlockKey, SliceRequired: schedtest.RackKey, SliceSize: 2},
	}
	var waiting []model.PodGroup
	for i := range 16 {
		t := model.GangTopology{Levels: lv, Required: schedtest.RackKey}
		if i%2 == 1 {
			t = model.GangTopology{Levels: lv, Required: schedtest.BlockKey, Preferred: schedtest.RackKey}
		}
		waiting = append(waiting, schedtest.Group(fmt.Sprintf("big%d", i)).Queue(benchQueues[i%3].Name).Created(int64(i)).Topology(t).Pods(4, schedtest.GPU(8, 4000)).Obj())
	}
	d := &steadyDriver{chunks: fullChunks(nodes, 7, func(int) int32 { return 0 }), rng: rand.New(rand.NewPCG(1, 2)), churn: 100,
		next: 7 * len(nodes), waiting: waiting, gang: func(n int) (int, *model.GangTopology) {
			if n%10 != 0 {
				return 1, nil
			}
			return 4, &shapes[n/10%len(shapes)]
		}}
	runSteady(b, d, nodes)
}

// runSteady times the cycles of d on nodes after a first one that places
// the starting state, the driver's churn applied between cycles.
func runSteady(b *testing.B, d *steadyDriver, nodes []model.Node) {
	b.Helper()
	d.snap = model.Snapshot{Nodes: nodes, Queues: benchQueues, Budget: model.DisruptionBudget{MaxEvictions: -1}}
	if d.policies {
		d.snap.Queues = slices.Clone(benchQueues)
		for i := range d.snap.Queues {
			d.snap.Queues[i].UsageHalfLife, d.snap.Queues[i].MinRuntime = 3600, 600
		}
	}
	d.step(model.Decisions{})
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	dec, err := s.Cycle(&d.snap)
	if err != nil {
		b.Fatal(err)
	}
	binds := 0
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		d.step(dec)
		before := cpuTime(b)
		b.StartTimer()
		if dec, err = s.Cycle(&d.snap); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime(b) - before
		b.StartTimer()
		binds = len(dec.Binds)
	}
	b.ReportMetric(float64(binds), "binds/cycle")
	// On a machine shared with other work the wall time of a cycle
	// includes the time it waited for a core; the process's CPU time
	// (every thread's, the collector's included) does not.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
