package mig_test

import (
	"context"
	"testing"

	"github.com/gpuplane/gpuplane/internal/mig"
)

// BenchmarkPlanAndApply measures the agent's own part of a
// reconfiguration on a simulated DGX H100: read the GPUs, parse nothing
// (the config is parsed once), plan and apply through the simulated
// driver. one-gpu changes GPU 3 between whole and 2x3g.40gb; all-gpus
// changes all eight, as a node-wide reconfiguration does. Each iteration
// is one reconfiguration.
func BenchmarkPlanAndApply(b *testing.B) {
	spec, err := mig.ParseBytes([]byte(`version: v1
mig-configs:
  whole:
    - devices: all
      mig-enabled: false
  gpu3:
    - devices: all
      mig-enabled: false
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  all:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, there string }{{"one-gpu", "gpu3"}, {"all-gpus", "all"}} {
		b.Run(bc.name, func(b *testing.B) {
			hw := newSim(b, "dgxh100")
			ctx := context.Background()
			names := []string{bc.there, "whole"}
			changed := 0
			b.ResetTimer()
			for i := range b.N {
				gpus, err := mig.GPUs(ctx, hw)
				if err != nil {
					b.Fatal(err)
				}
				p, err := mig.NewPlan(spec, names[i%2], gpus)
				if err != nil {
					b.Fatal(err)
				}
				if err := mig.ApplyPlan(ctx, hw, p); err != nil {
					b.Fatal(err)
				}
				changed += len(p.Changes)
			}
			b.ReportMetric(float64(changed)/float64(b.N), "gpus-changed/op")
		})
	}
}

// BenchmarkParseDefaultConfig parses mig-parted's default config (81
// configs, 613 lines), as the agent does on every ConfigMap change.
func BenchmarkParseDefaultConfig(b *testing.B) {
	data := readDefault(b)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := mig.ParseBytes(data); err != nil {
			b.Fatal(err)
		}
	}
}
