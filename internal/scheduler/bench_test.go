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

// BenchmarkCyclePreempt: 1,000 nodes x 8 GPUs full of low-priority 1-GPU
// pods, 200 pending high-priority 1-GPU pods of the same queue, each of
// which must preempt one victim.
func BenchmarkCyclePreempt(b *testing.B) {
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
