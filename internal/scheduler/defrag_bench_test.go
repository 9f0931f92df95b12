package scheduler_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// policyCluster is 5,000 nodes x 8 GPUs, each running three 2-GPU pods
// (2 GPUs free per node, 10,000 in all, none whole): lone groups, but on
// every tenth node one group of the three. With on, every group opted in
// to moves and the three-pod groups are elastic down to one pod.
func policyCluster(on bool) (nodes []model.Node, chunks [][]model.Allocation) {
	nodes = schedtest.Cluster("n", 5000, 8, 128000, 1<<20)
	chunks = make([][]model.Allocation, len(nodes))
	for n := range nodes {
		for k := range 3 {
			group, minMember := fmt.Sprintf("r%d-%d", n, k), 0
			if n%10 == 0 {
				group = fmt.Sprintf("e%d", n) // one group of the node's three pods
				if on {
					minMember = 1
				}
			}
			chunks[n] = append(chunks[n], model.Allocation{Pod: fmt.Sprintf("r%d-%d", n, k), Group: group, Queue: "a", Node: nodes[n].Name,
				Request: schedtest.GPU(2, 4000), GPUs: []model.GPUShare{{Index: 2 * k, Milli: model.MilliPerGPU}, {Index: 2*k + 1, Milli: model.MilliPerGPU}},
				StartedAt: int64(n), MinMember: minMember, Movable: on})
		}
	}
	return nodes, chunks
}

// BenchmarkCyclePolicies measures one cycle at 5,000 nodes with
// defragmentation (moves and drains) and elastic shrinking on, against the
// same cycle with them off: 200 one-GPU pods that fit, 50 whole-node
// (8-GPU) pods that fit only by moves, two of them drained for, and (preempt) 20 higher-priority 4-GPU pods that
// preempt, shrinking elastic groups when on, or (moves) none. The bound
// the policies are held to: on costs at most 1.2x off. With bounded, moves
// throw away at most 10 minutes of work (DefragPolicy.MaxLostWork): the
// first pod of every node checkpointed a minute ago and the other two
// never did, so a drained node's first group is moved ahead of the others
// and no node can be emptied by moves alone.
func BenchmarkCyclePolicies(b *testing.B) {
	for _, tc := range []struct {
		name    string
		on      bool
		preempt int
		bounded bool
	}{{"preempt/off", false, 20, false}, {"preempt/on", true, 20, false}, {"moves/off", false, 0, false}, {"moves/on", true, 0, false}, {"moves/on-bounded", true, 0, true}} {
		on := tc.on
		b.Run(tc.name, func(b *testing.B) {
			nodes, chunks := policyCluster(on)
			if tc.bounded {
				for n := range chunks {
					chunks[n][0].LastCheckpoint = 40000 - 60
				}
			}
			var pending []model.PodGroup
			for i := range 200 {
				pending = append(pending, schedtest.Group(fmt.Sprintf("p%d", i)).Queue("a").Created(int64(10000+i)).Pods(1, schedtest.GPU(1, 4000)).Obj())
			}
			for i := range 50 {
				pending = append(pending, schedtest.Group(fmt.Sprintf("big%d", i)).Queue("a").Created(int64(20000+i)).Pods(1, schedtest.GPU(8, 4000)).Obj())
			}
			for i := range tc.preempt {
				pending = append(pending, schedtest.Group(fmt.Sprintf("hi%d", i)).Queue("a").Priority(10).Created(int64(30000+i)).Pods(1, schedtest.GPU(4, 4000)).Obj())
			}
			// Every pending group has waited at least an hour: with drains
			// on, the whole-node pods are drained for.
			snap := model.Snapshot{Nodes: nodes, RunningByNode: chunks, Queues: []model.Queue{{Name: "a"}}, Pending: pending,
				Budget: model.DisruptionBudget{MaxEvictions: -1}, Now: 40000}
			if on {
				snap.Defrag = model.DefragPolicy{MaxMoves: 12, Window: 3600, DrainAfter: 3600}
			}
			if tc.bounded {
				snap.Defrag.MaxLostWork = 600
			}
			warm := snap
			warm.Pending = nil
			var moves, evictions, shrinks int
			var cpu time.Duration
			b.ResetTimer()
			for b.Loop() {
				// A fresh scheduler synced to the cluster, outside the
				// timing: the measured cycle decides everything. The
				// garbage of building it is collected before, so that
				// the measured cycle pays only for its own.
				b.StopTimer()
				s, err := scheduler.New(scheduler.Config{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Cycle(&warm); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				before := cpuTime(b)
				b.StartTimer()
				d, err := measuredCycle(s, &snap)
				b.StopTimer()
				cpu += cpuTime(b) - before
				b.StartTimer()
				if err != nil {
					b.Fatal(err)
				}
				moves, evictions, shrinks = len(d.Moves), len(d.Evictions), 0
				for _, e := range d.Evictions {
					if e.Shrink {
						shrinks++
					}
				}
			}
			// The process's CPU time, which on a shared machine does not
			// count the time the cycle waited for a core (bench_test.go).
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(moves), "moves/cycle")
			b.ReportMetric(float64(evictions), "evictions/cycle")
			b.ReportMetric(float64(shrinks), "shrinks/cycle")
		})
	}
}

// measuredCycle is the cycle BenchmarkCyclePolicies times, in a function
// of its own so that a tool counting instructions can count it alone (one
// P and no asynchronous preemption: callgrind stops at Go's preemption
// signals):
//
//	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 GOGC=off valgrind --tool=callgrind \
//	  --toggle-collect='*scheduler_test.measuredCycle' \
//	  ./core.test -test.run '^$' -test.bench 'CyclePolicies/moves/on$' -test.benchtime 1x
//
//go:noinline
func measuredCycle(s *scheduler.Scheduler, snap *model.Snapshot) (model.Decisions, error) {
	return s.Cycle(snap)
}
