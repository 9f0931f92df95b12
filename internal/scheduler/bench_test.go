package scheduler_test

import (
	"fmt"
	"testing"

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
