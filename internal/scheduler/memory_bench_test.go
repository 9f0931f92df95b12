package scheduler_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// BenchmarkLongRunShapes: what a scheduler holds after a long run of pods
// that each ask for a request of their own (every distinct CPU request is
// a shape the placer keeps a cache for), at 5,000 nodes x 8 GPUs. Each
// cycle places one pod of a new shape; the pod of the cycle before has
// exited. heap-MiB is the live heap after shapes such cycles, against a
// scheduler that ran one: it should stay flat however many shapes came
// and went.
func BenchmarkLongRunShapes(b *testing.B) {
	for _, shapes := range []int{500, 2000} {
		b.Run(fmt.Sprintf("shapes=%d", shapes), func(b *testing.B) {
			nodes := schedtest.Cluster("n", 5000, 8, 128000, 1<<20)
			var grew float64
			for b.Loop() {
				s, err := scheduler.New(scheduler.Config{})
				if err != nil {
					b.Fatal(err)
				}
				cycle := func(k int) {
					g := schedtest.Group(fmt.Sprintf("p%d", k)).Queue("a").Created(int64(k)).Pods(1, schedtest.GPU(1, 100+int64(k))).Obj()
					snap := model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "a"}}, Pending: []model.PodGroup{g}, Now: int64(k)}
					if _, err := s.Cycle(&snap); err != nil {
						b.Fatal(err)
					}
				}
				cycle(0)
				before := liveHeap()
				for k := 1; k < shapes; k++ {
					cycle(k)
				}
				grew = (liveHeap() - before) / (1 << 20)
				runtime.KeepAlive(s)
			}
			b.ReportMetric(grew, "heap-MiB")
		})
	}
}

// liveHeap is the bytes the heap holds once garbage is collected.
func liveHeap() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}
