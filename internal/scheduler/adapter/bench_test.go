package adapter

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/gpuplane/gpuplane/internal/scheduler"
)

// BenchmarkSnapshotAndCycle measures what one adapter cycle costs before
// any API call: building the snapshot from the cache and running the core,
// on 1,000 nodes x 8 GPUs with 4,000 running and 4,000 pending single-GPU
// pods.
func BenchmarkSnapshotAndCycle(b *testing.B) {
	c := newClusterCache()
	for i := range 1000 {
		c.upsertNode(testNode(fmt.Sprintf("n%04d", i), rl("nvidia.com/gpu", "8", "cpu", "128", "memory", "1Ti"), nil, nil))
	}
	for i := range 8000 {
		p := testPod("bench", fmt.Sprintf("p%05d", i), rl("nvidia.com/gpu", "1"))
		if i < 4000 {
			p.Spec.NodeName = fmt.Sprintf("n%04d", i/4)
		}
		c.upsertPod(p)
	}
	bld := newBuilder("gpuplane-scheduler", 64, logr.Discard())
	core, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c.mu.Lock()
		in := bld.build(c, time.Unix(0, 0))
		c.mu.Unlock()
		if _, err := core.Cycle(&in.snap); err != nil {
			b.Fatal(err)
		}
	}
}
