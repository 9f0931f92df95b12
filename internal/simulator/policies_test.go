package simulator

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Two low-priority jobs hold the node: "saved" (started at 0,
// checkpointing every 100 s, protected for 270 s) and "unsaved" (arriving
// at 10, started by the cycle at 20, never checkpointing, protected for
// 250 s): both may be evicted from 270 on. An urgent job arrives at 50.
const checkpointTrace = `
nodes:
- {name: n, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: A100}
queues:
- {name: q}
pods:
- {name: saved, queue: q, gpus: 4, milliCPU: 1000, createdAt: 0, duration: 100000, minRuntime: 270, checkpointEvery: 100}
- {name: unsaved, queue: q, gpus: 4, milliCPU: 1000, createdAt: 10, duration: 100000, minRuntime: 250}
- {name: urgent, queue: q, priority: 5, gpus: 4, milliCPU: 1000, createdAt: 50, duration: 100}
`

// The simulator replays the decisions on minimum runtime and checkpoints:
// nothing is evicted before the victims' minimum runtime, the snapshot
// carries each pod's last checkpoint, and the victim is the one that
// loses less, or the newer one when victims are chosen by age alone.
func TestEventReplaysMinimumRuntimeAndCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		byAge bool
		want  string
	}{{false, "saved"}, {true, "unsaved"}} {
		tr, err := ReadYAMLTrace("ckpt.yaml", strings.NewReader(checkpointTrace))
		if err != nil {
			t.Fatal(err)
		}
		var evictedAt int64 = -1
		var victim string
		var lastCkpt int64
		cfg := EventConfig{Policy: placement.DefaultPolicy, Interval: 20, VictimsByAge: tc.byAge,
			OnCycle: func(now int64, snap *model.Snapshot, d *model.Decisions) {
				if len(d.Evictions) == 0 || evictedAt >= 0 {
					return
				}
				evictedAt, victim = now, d.Evictions[0].Pod
				for a := range snap.AllRunning() {
					if a.Pod == "saved" {
						lastCkpt = a.LastCheckpoint
					}
				}
			}}
		if _, err := RunEvent(context.Background(), tr, cfg); err != nil {
			t.Fatal(err)
		}
		// At 270 saved loses 4 GPUs x 70 s since its checkpoint at 200,
		// unsaved 4 x 250 s.
		if evictedAt != 270 || victim != tc.want {
			t.Errorf("byAge %v: evicted %s at %d, want %s at 270", tc.byAge, victim, evictedAt, tc.want)
		}
		if lastCkpt != 200 {
			t.Errorf("byAge %v: saved's last checkpoint %d at eviction, want 200", tc.byAge, lastCkpt)
		}
	}
}

func TestYAMLTraceRefusesNegativePolicies(t *testing.T) {
	for _, field := range []string{"minRuntime: -1", "checkpointEvery: -5"} {
		y := "nodes:\n- {name: n, milliCPU: 1000, memoryMiB: 1024}\npods:\n- {name: p, milliCPU: 100, " + field + "}\n"
		if _, err := ReadYAMLTrace("bad.yaml", strings.NewReader(y)); err == nil || !strings.Contains(err.Error(), "minRuntime and checkpointEvery") {
			t.Errorf("%s: err = %v, want one naming the fields", field, err)
		}
	}
}
