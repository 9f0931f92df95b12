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
