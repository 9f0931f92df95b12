package simulator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// drainTrace: x runs u (2 GPUs, until 1000) and y runs v (4 GPUs, for
// long); big, a whole-node pod, comes at 10; from 500 on, 2-GPU jobs
// that fit only x come every 100 s and run 2000 s each, so that x never
// empties by itself until the last of them ends.
func drainTrace() string {
	var b strings.Builder
	b.WriteString(`nodes:
- {name: x, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: A100}
- {name: y, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: H100}
pods:
- {name: u, gpus: 2, gpuModels: [A100], milliCPU: 1000, createdAt: 0, duration: 1000}
- {name: v, gpus: 4, gpuModels: [H100], milliCPU: 1000, createdAt: 0, duration: 100000}
- {name: big, gpus: 8, milliCPU: 1000, createdAt: 10, duration: 100}
`)
	for i := range 26 {
		fmt.Fprintf(&b, "- {name: s%d, gpus: 2, gpuModels: [A100], milliCPU: 1000, createdAt: %d, duration: 2000}\n", i, 500+100*i)
	}
	return b.String()
}

// TestEventReplaysDrains: with drains, the core keeps x for big once it
// has waited, the 2-GPU jobs wait, and big starts when u ends; without
// (no delay, or no moves) the jobs keep x busy and big waits for the last
// of them.
func TestEventReplaysDrains(t *testing.T) {
	for _, tc := range []struct {
		name   string
		defrag model.DefragPolicy
		early  bool
	}{
		{"drains", model.DefragPolicy{MaxMoves: 2, Window: 3600, DrainAfter: 100}, true},
		{"no delay set", model.DefragPolicy{MaxMoves: 2, Window: 3600}, false},
		{"moves off", model.DefragPolicy{DrainAfter: 100}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadYAMLTrace("drain.yaml", strings.NewReader(drainTrace()))
			if err != nil {
				t.Fatal(err)
			}
			bigAt := int64(-1)
			cfg := EventConfig{Policy: placement.DefaultPolicy, Interval: 10, Defrag: tc.defrag,
				OnCycle: func(now int64, _ *model.Snapshot, d *model.Decisions) {
					for _, b := range d.Binds {
						if b.Pod == "big" {
							bigAt = now
						}
					}
				}}
			if _, err := RunEvent(context.Background(), tr, cfg); err != nil {
				t.Fatal(err)
			}
			if tc.early && (bigAt < 1000 || bigAt > 1010) {
				t.Fatalf("big bound at %d, want when u ends (1000)", bigAt)
			}
			if !tc.early && bigAt < 4000 {
				t.Fatalf("big bound at %d, want after the 2-GPU jobs left x", bigAt)
			}
		})
	}
}
