package simulator

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

func builtin(t testing.TB) *WorkloadTables {
	t.Helper()
	tb, err := BuiltinWorkloadTables()
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func smallSpec(seed uint64) ContendedSpec {
	s := DefaultContendedSpec(seed)
	s.Nodes, s.Hours = 40, 6
	return s
}

func TestGenerateContendedIsSeeded(t *testing.T) {
	tb := builtin(t)
	a, err := GenerateContended(tb, smallSpec(7))
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateContended(tb, smallSpec(7))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed generated two different workloads")
	}
	c, err := GenerateContended(tb, smallSpec(8))
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Pods, c.Pods) {
		t.Fatal("seeds 7 and 8 generated the same pods")
	}
	if !reflect.DeepEqual(a.Nodes, c.Nodes) || !reflect.DeepEqual(a.Queues, c.Queues) {
		t.Fatal("the cluster and queues depend on the seed; they should follow the spec alone")
	}
}

// The busiest hour offers Load times the cluster's GPU-hours and every
// hour follows the Alibaba trace's daily profile, within half the
// largest job (the generator's stopping rule).
func TestGenerateContendedLoad(t *testing.T) {
	tb := builtin(t)
	var peakW int64
	for _, c := range tb.ArrivalsByHour {
		peakW = max(peakW, c)
	}
	for _, load := range []float64{1.2, 1.5, 2} {
		spec := DefaultContendedSpec(3)
		spec.Nodes, spec.Hours, spec.Load = 200, 24, load
		tr, err := GenerateContended(tb, spec)
		if err != nil {
			t.Fatal(err)
		}
		capHour := float64(tr.GPUCapacityMilli()) / model.MilliPerGPU * 3600
		jobs := map[string]float64{}
		for i := range tr.Pods {
			p := &tr.Pods[i]
			g := p.Group
			if g == "" {
				g = p.Name
			}
			jobs[g] += float64(p.Request.GPUMilliTotal()) / model.MilliPerGPU * float64(p.RunTime())
		}
		var biggest float64
		for _, v := range jobs {
			biggest = max(biggest, v)
		}
		tol := biggest / 2 / capHour
		by := OfferedLoadByHour(tr)
		if len(by) != spec.Hours {
			t.Fatalf("load %g: arrivals in %d hours, want %d", load, len(by), spec.Hours)
		}
		for h, got := range by {
			want := load * float64(tb.ArrivalsByHour[h%24]) / float64(peakW)
			if math.Abs(got-want) > tol {
				t.Errorf("load %g: hour %d offers %.3f, want %.3f ± %.3f", load, h, got, want, tol)
			}
		}
		if peak := slices.Max(by); math.Abs(peak-load) > tol {
			t.Errorf("load %g: the busiest hour offers %.3f", load, peak)
		}
	}
}

// Every pod comes from the tables: shapes, gangs and roles, RDMA, run
// times within Philly's range and the clamp, checkpoint intervals,
// teams, and arrival times within the span.
func TestGenerateContendedShapesFromSources(t *testing.T) {
	tb := builtin(t)
	spec := smallSpec(11)
	tr, err := GenerateContended(tb, spec)
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		cpu, mem, milli int64
		gpus            int
	}
	gpuShapes, cpuShapes := map[shape]bool{}, map[shape]bool{}
	for _, s := range tb.GPUPods {
		gpuShapes[shape{s.MilliCPU, s.MemoryMiB, s.GPUMilli, s.GPUs}] = true
	}
	for _, s := range tb.CPUPods {
		cpuShapes[shape{s.MilliCPU, s.MemoryMiB, s.RDMA, 0}] = true
	}
	rdma := map[int64]bool{0: true}
	for _, w := range tb.GPURDMA {
		rdma[w.Value] = true
	}
	gangs := map[[2]int]bool{{1, 0}: true}
	for _, g := range tb.Gangs {
		gangs[[2]int{g.GPUPods, g.CPUPods}] = true
	}
	teams := map[string]bool{}
	for _, tm := range spec.Teams {
		teams[tm.Name] = true
	}
	lo, hi := max(tb.RunTimes[0], spec.MinRunTime), min(tb.RunTimes[len(tb.RunTimes)-1], spec.MaxRunTime)
	members := map[string][2]int{}
	for i := range tr.Pods {
		p := &tr.Pods[i]
		r := &p.Request
		if r.UsesGPU() {
			if !gpuShapes[shape{r.MilliCPU, r.MemoryMiB, r.GPUMilli, r.GPUs}] {
				t.Errorf("pod %s: GPU shape %+v is not one of openb's", p.Name, *r)
			}
			if !rdma[r.Scalars[RDMAResource]] {
				t.Errorf("pod %s: RDMA %d is not one of the trace's", p.Name, r.Scalars[RDMAResource])
			}
		} else if !cpuShapes[shape{r.MilliCPU, r.MemoryMiB, r.Scalars[RDMAResource], 0}] {
			t.Errorf("pod %s: CPU shape %+v is not one of the CN role's", p.Name, *r)
		}
		if p.Duration < lo || p.Duration > hi {
			t.Errorf("pod %s: run time %d outside [%d, %d]", p.Name, p.Duration, lo, hi)
		}
		if p.CheckpointEvery != 0 && !slices.Contains(spec.CheckpointIntervals, p.CheckpointEvery) {
			t.Errorf("pod %s: checkpoint interval %d", p.Name, p.CheckpointEvery)
		}
		if !teams[p.Queue] {
			t.Errorf("pod %s: queue %q is no team's", p.Name, p.Queue)
		}
		if p.CreatedAt < 0 || p.CreatedAt >= int64(spec.Hours)*3600 {
			t.Errorf("pod %s: arrives at %d, outside the %d hours", p.Name, p.CreatedAt, spec.Hours)
		}
		g := p.Group
		if g == "" {
			g = p.Name
		}
		m := members[g]
		if r.UsesGPU() {
			m[0]++
		} else {
			m[1]++
		}
		members[g] = m
	}
	for g, m := range members {
		if !gangs[m] {
			t.Errorf("job %s: %d GPU and %d CPU members, no batch of the trace's", g, m[0], m[1])
		}
	}
	if len(members) < 100 {
		t.Fatalf("only %d jobs", len(members))
	}
	// The cluster follows openb's machine types, all of them for as
	// many nodes as openb has.
	types := map[NodeShape]bool{}
	for _, n := range tb.Nodes {
		types[NodeShape{MilliCPU: n.MilliCPU, MemoryMiB: n.MemoryMiB, GPUs: n.GPUs, Model: n.Model}] = true
	}
	for _, n := range tr.Nodes {
		m := ""
		if len(n.GPUs) > 0 {
			m = n.GPUs[0].Model
		}
		if !types[NodeShape{MilliCPU: n.MilliCPU, MemoryMiB: n.MemoryMiB, GPUs: len(n.GPUs), Model: m}] {
			t.Errorf("node %s is no openb machine type", n.Name)
		}
	}
	var g int64
	for _, q := range tr.Queues {
		g += q.Guaranteed.GPUMilli
	}
	if c := tr.GPUCapacityMilli(); math.Abs(float64(g-c)) > float64(len(tr.Queues)) {
		t.Errorf("guarantees add to %d milli-GPU of %d; the default teams are guaranteed the whole cluster", g, c)
	}
}

func TestContendedNodesLargestRemainder(t *testing.T) {
	types := []NodeShape{{GPUs: 8, MilliCPU: 1, MemoryMiB: 1, Count: 5}, {GPUs: 2, MilliCPU: 1, MemoryMiB: 1, Count: 3}, {MilliCPU: 1, MemoryMiB: 1, Count: 2}}
	// 4 nodes: exact shares 2, 1.2, 0.8 -> 2, 1, 1.
	nodes := contendedNodes(types, 4)
	var got []int
	for _, n := range nodes {
		got = append(got, len(n.GPUs))
	}
	if !slices.Equal(got, []int{8, 8, 2, 0}) {
		t.Fatalf("GPUs per node %v, want [8 8 2 0]", got)
	}
	if nodes[0].Allocatable[RDMAResource] != 200 || nodes[2].Allocatable[RDMAResource] != 100 || nodes[3].Allocatable[RDMAResource] != 100 {
		t.Fatalf("RDMA %v, want 2 NICs for 8 GPUs, 1 for fewer", nodes)
	}
}

func TestFitsEmpty(t *testing.T) {
	nodes := []model.Node{{MilliCPU: 8000, MemoryMiB: 800, Allocatable: map[string]int64{RDMAResource: 100},
		GPUs: []model.GPU{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}}}}
	one := PodShape{MilliCPU: 1000, MemoryMiB: 100, GPUs: 1}
	half := PodShape{MilliCPU: 1000, MemoryMiB: 100, GPUMilli: 500}
	cpu := PodShape{MilliCPU: 3000, MemoryMiB: 100, RDMA: 10}
	for _, tc := range []struct {
		name string
		g    GangShape
		gpu  PodShape
		rdma int64
		want bool
	}{
		{"two GPUs on two", GangShape{GPUPods: 2}, one, 0, true},
		{"three GPUs on two", GangShape{GPUPods: 3}, one, 0, false},
		{"four halves on two", GangShape{GPUPods: 4}, half, 0, true},
		{"five halves on two", GangShape{GPUPods: 5}, half, 0, false},
		{"CPU members within the cores", GangShape{GPUPods: 2, CPUPods: 2}, one, 0, true},
		{"CPU members beyond them", GangShape{GPUPods: 2, CPUPods: 3}, one, 0, false},
		{"RDMA beyond the NIC", GangShape{GPUPods: 2, CPUPods: 1}, one, 50, false},
	} {
		if got := fitsEmpty(nodes, tc.g, &tc.gpu, &cpu, tc.rdma); got != tc.want {
			t.Errorf("%s: fits %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestQuantileAt(t *testing.T) {
	q := []int64{0, 10, 100}
	for _, tc := range []struct {
		u    float64
		want int64
	}{{0, 0}, {0.25, 5}, {0.5, 10}, {0.75, 55}, {0.999999, 100}, {1, 100}} {
		if got := quantileAt(q, tc.u); got != tc.want {
			t.Errorf("quantileAt(%g) = %d, want %d", tc.u, got, tc.want)
		}
	}
}

func TestContendedSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*ContendedSpec)
	}{
		{"nodes", func(s *ContendedSpec) { s.Nodes = 0 }},
		{"hours", func(s *ContendedSpec) { s.Hours = 0 }},
		{"load", func(s *ContendedSpec) { s.Load = 0 }},
		{"load", func(s *ContendedSpec) { s.Load = math.NaN() }},
		{"teams", func(s *ContendedSpec) { s.Teams = nil }},
		{"teams[1].name", func(s *ContendedSpec) { s.Teams[1].Name = s.Teams[0].Name }},
		{"teams[0].demand", func(s *ContendedSpec) { s.Teams[0].Demand = 0 }},
		{"teams: guarantees", func(s *ContendedSpec) { s.Teams[0].Guarantee = 0.9 }},
		{"maxRunTime", func(s *ContendedSpec) { s.MaxRunTime = 1 }},
		{"maxGangShare", func(s *ContendedSpec) { s.MaxGangShare = 2 }},
		{"checkpointIntervals[0]", func(s *ContendedSpec) { s.CheckpointIntervals = []int64{0} }},
		{"movableShare", func(s *ContendedSpec) { s.MovableShare = 1.5 }},
		{"movableShare", func(s *ContendedSpec) { s.MovableShare = math.NaN() }},
	} {
		s := DefaultContendedSpec(1)
		tc.edit(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %v, want one naming %s", tc.field, err, tc.field)
		}
	}
	if s := DefaultContendedSpec(1); s.Validate() != nil {
		t.Fatal(s.Validate())
	}
}

func TestParseTeams(t *testing.T) {
	got, err := ParseTeams("x:0.5:0.7, y:0.5:0.3")
	if err != nil || !reflect.DeepEqual(got, []Team{{"x", 0.5, 0.7}, {"y", 0.5, 0.3}}) {
		t.Fatalf("ParseTeams = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "x:1", "x:a:1", "x:1:b"} {
		if _, err := ParseTeams(bad); err == nil {
			t.Errorf("ParseTeams(%q): no error", bad)
		}
	}
}

// Distill on small hand-made traces: shapes and priorities by QoS, node
// types, batches by app and second with their roles, RDMA, the daily
// profile and run-time quantiles.
func TestDistill(t *testing.T) {
	pods, err := ParseOpenBPods("pods.csv", strings.NewReader(`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,1000,100,1,500,,LS,Running,0,10,0
p1,1000,100,1,500,,BE,Running,0,10,0
p2,1000,100,1,500,,LS,Running,0,10,0
p3,2000,200,2,1000,,BE,Running,0,10,0
p4,2000,200,0,0,,BE,Running,0,10,0
`))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := ParseOpenBNodes("nodes.csv", strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,800,2,T4\nn1,8000,800,2,T4\nn2,4000,400,0,\n"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := ParsePhillyRunTimes("philly.csv", strings.NewReader("runtime\n40.0\n0.0\n10.0\n20.0\n30.0\n"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := ParseAlibabaGPU2025("ali.csv", strings.NewReader(`instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time
i0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
i1,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,3600.0,3600.0,7200.0
i2,HN,app_1,12,12,1,1,50,50,120.0,120.0,640.0,800.0,8,3600.0,3600.0,
i3,CN,app_1,64,64,0,0,1,1,320.0,320.0,255.0,300.0,-1,3600.0,3600.0,NaN
i4,CN,app_2,64,64,0,0,1,1,320.0,320.0,255.0,300.0,-1,90000.0,90000.0,90100.0
i5,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,3601.0,3601.0,
`))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := Distill(pods, nodes, runs, inst, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantGPU := []PodShape{
		{MilliCPU: 1000, MemoryMiB: 100, GPUMilli: 500, Priority: 1, Count: 2},
		{MilliCPU: 1000, MemoryMiB: 100, GPUMilli: 500, Count: 1},
		{MilliCPU: 2000, MemoryMiB: 200, GPUs: 2, Count: 1},
	}
	if !reflect.DeepEqual(tb.GPUPods, wantGPU) {
		t.Errorf("gpuPods %+v, want %+v", tb.GPUPods, wantGPU)
	}
	if want := []NodeShape{{MilliCPU: 8000, MemoryMiB: 800, GPUs: 2, Model: "T4", Count: 2}, {MilliCPU: 4000, MemoryMiB: 400, Count: 1}}; !reflect.DeepEqual(tb.Nodes, want) {
		t.Errorf("nodes %+v, want %+v", tb.Nodes, want)
	}
	// Batches: app_1 at 3600 (2 HN, 1 CN), app_1 at 3601 (1 HN); app_2's
	// has no GPU member, i0 predates the trace.
	if want := []GangShape{{GPUPods: 1, CPUPods: 0, Count: 1}, {GPUPods: 2, CPUPods: 1, Count: 1}}; !reflect.DeepEqual(tb.Gangs, want) {
		t.Errorf("gangs %+v, want %+v", tb.Gangs, want)
	}
	if want := []PodShape{{MilliCPU: 64000, MemoryMiB: 320 * 1024, RDMA: 1, Count: 2}}; !reflect.DeepEqual(tb.CPUPods, want) {
		t.Errorf("cpuPods %+v, want %+v", tb.CPUPods, want)
	}
	if want := []Weighted{{Value: 25, Count: 3}, {Value: 50, Count: 1}}; !reflect.DeepEqual(tb.GPURDMA, want) {
		t.Errorf("gpuRdma %+v, want %+v", tb.GPURDMA, want)
	}
	var hours [24]int64
	hours[1] = 5 // i1, i2, i3 and i5 in hour 1; i4 at 90000 s, hour 25, the day's hour 1
	if tb.ArrivalsByHour != hours {
		t.Errorf("arrivalsByHour %v, want %v", tb.ArrivalsByHour, hours)
	}
	if want := []int64{0, 20, 40}; !slices.Equal(tb.RunTimes, want) {
		t.Errorf("runTimes %v, want %v", tb.RunTimes, want)
	}
	all, err := Distill(pods, nodes, runs, inst, 0)
	if err != nil || !slices.Equal(all.RunTimes, []int64{0, 10, 20, 30, 40}) {
		t.Errorf("every run time: %v, %v", all.RunTimes, err)
	}
}

func TestParseTraceErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"philly negative", "runtime\n-1\n", "runtime"},
		{"philly nan", "runtime\nNaN\n", "runtime"},
		{"philly header", "minutes\n1\n", `"runtime"`},
	} {
		if _, err := ParsePhillyRunTimes("f.csv", strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	head := "instance_sn,role,app_name,cpu_request,gpu_request,rdma_request,memory_request,creation_time,deletion_time\n"
	for _, tc := range []struct{ name, row, want string }{
		{"role", "i,XN,a,1,0,1,1,,\n", "role"},
		{"app", "i,CN,,1,0,1,1,,\n", "app_name"},
		{"cpu", "i,CN,a,x,0,1,1,,\n", "cpu_request"},
		{"rdma", "i,CN,a,1,0,101,1,,\n", "rdma_request"},
		{"gpu", "i,HN,a,1,99,1,1,,\n", "gpu_request"},
		{"order", "i,CN,a,1,0,1,1,10,5\n", "deletion_time"},
		{"time", "i,CN,a,1,0,1,1,-3,\n", "creation_time"},
	} {
		if _, err := ParseAlibabaGPU2025("f.csv", strings.NewReader(head+tc.row)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// tracesDir is where the full traces are, from this package.
var tracesDir = filepath.Join("..", "..", "..", "shared", "traces")

// The tables in the repository are what `go generate` distills from the
// full traces (skipped without them).
func TestWorkloadTablesUpToDate(t *testing.T) {
	if _, err := os.Stat(filepath.Join(tracesDir, PhillyRunTimeFile)); err != nil {
		t.Skipf("traces not found at %s", tracesDir)
	}
	tb, err := ReadWorkloadTables(tracesDir, 200)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tb.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), builtinTables) {
		t.Fatal("workload_tables.json is stale: run go generate ./internal/simulator")
	}
}

// Every job of the default workload starts on the empty cluster under
// every configuration's placement: the core itself binds each gang whole
// in one cycle. (Seed 2 drew gangs of up to 36 GPU and 13 CPU members,
// which no cluster of 48 nodes holds, before the generator bounded a
// job's CPU, memory and RDMA as well as its GPUs.)
func TestGeneratedJobsFitTheEmptyCluster(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		tr, err := GenerateContended(builtin(t), DefaultContendedSpec(seed))
		if err != nil {
			t.Fatal(err)
		}
		jobs := map[string][]model.Pod{}
		queueOf := map[string]string{}
		for i := range tr.Pods {
			p := &tr.Pods[i]
			if p.Group != "" {
				jobs[p.Group] = append(jobs[p.Group], model.Pod{Name: p.Name, Request: p.Request})
				queueOf[p.Group] = p.Queue
			}
		}
		if len(jobs) < 20 {
			t.Fatalf("seed %d: only %d gangs", seed, len(jobs))
		}
		for _, c := range SchedulerConfigs() {
			for g, pods := range jobs {
				s, err := scheduler.New(scheduler.Config{Policy: c.Placement, Targets: []placement.Target{{P: 1}}})
				if err != nil {
					t.Fatal(err)
				}
				snap := model.Snapshot{Nodes: tr.Nodes, Queues: tr.Queues, Budget: model.DisruptionBudget{MaxEvictions: -1},
					Pending: []model.PodGroup{{Name: g, Queue: queueOf[g], Pods: pods}}}
				d, err := s.Cycle(&snap)
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Binds) != len(pods) {
					t.Fatalf("seed %d, %s: gang %s of %d pods: %d bound on the empty cluster", seed, c.Placement, g, len(pods), len(d.Binds))
				}
			}
		}
	}
}

// Jobs checkpoint and opt in to moves in the spec's shares, a job's pods
// alike, and only a job that checkpoints opts in.
func TestGenerateContendedCheckpointsAndMoves(t *testing.T) {
	tb := builtin(t)
	spec := smallSpec(5)
	tr, err := GenerateContended(tb, spec)
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		every   int64
		movable bool
	}
	jobs := map[string]job{}
	for i := range tr.Pods {
		p := &tr.Pods[i]
		g := p.Group
		if g == "" {
			g = p.Name
		}
		j := job{p.CheckpointEvery, p.Movable}
		if prev, ok := jobs[g]; ok && prev != j {
			t.Fatalf("job %s: pods differ, %+v and %+v", g, prev, j)
		}
		jobs[g] = j
		if p.Movable && p.CheckpointEvery == 0 {
			t.Fatalf("pod %s opts in to moves but never checkpoints", p.Name)
		}
	}
	var ckpt, movable float64
	for _, j := range jobs {
		if j.every > 0 {
			ckpt++
		}
		if j.movable {
			movable++
		}
	}
	n := float64(len(jobs))
	// Binomial draws of several hundred jobs: within 4 standard deviations.
	within := func(got, p, n float64) bool { return math.Abs(got/n-p) <= 4*math.Sqrt(p*(1-p)/n) }
	if !within(ckpt, spec.CheckpointShare, n) || !within(movable, spec.MovableShare, ckpt) {
		t.Fatalf("%g of %g jobs checkpoint (want %g), %g of those opt in to moves (want %g)", ckpt, n, spec.CheckpointShare, movable, spec.MovableShare)
	}
	spec.MovableShare = 0
	still, err := GenerateContended(tb, spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range still.Pods {
		if still.Pods[i].Movable {
			t.Fatalf("pod %s opts in with a movable share of 0", still.Pods[i].Name)
		}
	}
}
