package simulator

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// openbDir is where benchmarks look for the Alibaba trace; they skip when
// it is absent (a fresh clone has no ../shared).
var openbDir = filepath.Join("..", "..", "..", "shared", "traces", "openb")

// BenchmarkPackingOpenB is one FGD-paper packing run (openb default, tune
// 1.3, seed 1) per policy.
func BenchmarkPackingOpenB(b *testing.B) {
	if _, err := os.Stat(filepath.Join(openbDir, OpenBNodeFile)); err != nil {
		b.Skipf("openb trace not found at %s", openbDir)
	}
	tr, err := ReadOpenB(openbDir, "default")
	if err != nil {
		b.Fatal(err)
	}
	for _, policy := range []string{"fgd", "bestfit", placement.DefaultPolicy} {
		b.Run(policy, func(b *testing.B) {
			var r *Result
			for b.Loop() {
				if r, err = RunPacking(context.Background(), tr, PackingConfig{Policy: policy, Seed: 1, Tune: 1.3}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*r.MilliGPUAllocationRatio, "alloc%")
			b.ReportMetric(float64(r.Pods), "pods")
		})
	}
}

// BenchmarkContendedFullTraces distills the contended workload's tables
// from the full traces in ../shared/traces (every one of Philly's run
// times, not the quantiles kept in the repository), generates seed 1's
// default workload and replays it under each scheduler configuration. It
// skips when the traces are absent.
func BenchmarkContendedFullTraces(b *testing.B) {
	if _, err := os.Stat(filepath.Join(tracesDir, PhillyRunTimeFile)); err != nil {
		b.Skipf("traces not found at %s", tracesDir)
	}
	tables, err := ReadWorkloadTables(tracesDir, 0)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := GenerateContended(tables, DefaultContendedSpec(1))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range SchedulerConfigs() {
		b.Run(c.Name, func(b *testing.B) {
			var r *Result
			for b.Loop() {
				if r, err = RunEvent(context.Background(), tr, EventConfig{Seed: 1, Config: &c}); err != nil {
					b.Fatal(err)
				}
			}
			e := r.Event
			b.ReportMetric(e.JCTP50, "jctP50-s")
			b.ReportMetric(e.JCTP95, "jctP95-s")
			b.ReportMetric(e.WaitP95, "waitP95-s")
			b.ReportMetric(e.FairnessDeviation, "fairnessDev")
			b.ReportMetric(e.LostGPUHours, "lostGPUh")
			b.ReportMetric(float64(e.Jobs), "jobs")
		})
	}
}
