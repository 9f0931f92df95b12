package sim

import (
	"context"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// BenchmarkInventory reads what `gpuplane-agent inventory` prints: the
// driver stack, every GPU with its MIG devices, and the topology, on a DGX
// H100 with MIG devices on two GPUs.
func BenchmarkInventory(b *testing.B) {
	be, _ := newTestBackend(b, "dgxh100")
	ctx := context.Background()
	for _, i := range []int{0, 7} {
		if err := be.SetMIGMode(ctx, i, true); err != nil {
			b.Fatal(err)
		}
		for range 7 {
			gi, err := be.CreateGPUInstance(ctx, i, "1g.10gb", nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := be.CreateComputeInstance(ctx, i, gi.ID, ""); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := be.System(ctx); err != nil {
			b.Fatal(err)
		}
		devs, err := be.Devices(ctx)
		if err != nil || len(devs) != 8 {
			b.Fatal(err)
		}
		if _, err := be.Topology(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSampleAll8 takes one telemetry sample of every GPU of a loaded
// DGX H100, as the metrics exporter does on each scrape.
func BenchmarkSampleAll8(b *testing.B) {
	be, clk := newTestBackend(b, "dgxh100")
	for i := range 8 {
		if err := be.RunProcess(i, Proc{PID: uint32(i + 1), MemMiB: 4096, Util: 75, MemUtil: 30}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	var s gpu.Sample
	b.ReportAllocs()
	for b.Loop() {
		clk.Advance(time.Millisecond)
		for i := range 8 {
			if err := be.Sample(ctx, i, &s); err != nil {
				b.Fatal(err)
			}
		}
	}
}
