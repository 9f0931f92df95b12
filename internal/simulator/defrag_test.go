package simulator

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Two movable 4-GPU jobs land on two nodes, one each, beside short pods
// pinned to each node by GPU model; once those finish, 8 GPUs are free
// but no node has 8 for the gang that then arrives.
const fragmentedTrace = `
nodes:
- {name: x, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: A100}
- {name: y, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: H100}
pods:
- {name: onx, gpus: 4, gpuModels: [A100], milliCPU: 1000, createdAt: 0, duration: 50}
- {name: ony, gpus: 4, gpuModels: [H100], milliCPU: 1000, createdAt: 0, duration: 50}
- {name: a, count: 1, minMember: 1, gpus: 4, milliCPU: 1000, createdAt: 1, duration: 100000, movable: true}
- {name: b, count: 1, minMember: 1, gpus: 4, milliCPU: 1000, createdAt: 1, duration: 100000, movable: true}
- {name: big, gpus: 8, milliCPU: 1000, createdAt: 60, duration: 1000}
`

// TestEventReplaysMoves: the core moves one job beside the other, the
// simulator carries the move out (the job's pod leaves and is bound again
// where the core held it), and the gang starts in the freed node; without
// a budget the gang waits for the jobs to end, and so it does when the
// jobs, which never checkpoint, ran longer than MaxLostWork before it
// came.
func TestEventReplaysMoves(t *testing.T) {
	for _, tc := range []struct {
		name      string
		defrag    model.DefragPolicy
		wantMoves int
	}{
		{"budget", model.DefragPolicy{MaxMoves: 2, Window: 3600}, 1},
		{"off", model.DefragPolicy{}, 0},
		{"within the lost-work bound", model.DefragPolicy{MaxMoves: 2, Window: 3600, MaxLostWork: 120}, 1},
		{"past the lost-work bound", model.DefragPolicy{MaxMoves: 2, Window: 3600, MaxLostWork: 30}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadYAMLTrace("fragmented.yaml", strings.NewReader(fragmentedTrace))
			if err != nil {
				t.Fatal(err)
			}
			var moves []model.Move
			bigAt := int64(-1)
			movedBound := map[string]int64{}
			started := map[string]int64{}
			cfg := EventConfig{Policy: placement.DefaultPolicy, Interval: 1, Defrag: tc.defrag,
				OnCycle: func(now int64, _ *model.Snapshot, d *model.Decisions) {
					moves = append(moves, d.Moves...)
					for _, b := range d.Binds {
						if _, ok := started[b.Group]; !ok {
							started[b.Group] = now
						}
						if b.Pod == "big" {
							bigAt = now
						}
						for _, m := range moves {
							if m.Group == b.Group {
								movedBound[b.Pod] = now
							}
						}
					}
				}}
			res, err := RunEvent(context.Background(), tr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(moves) != tc.wantMoves {
				t.Fatalf("moves %+v, want %d", moves, tc.wantMoves)
			}
			var movedStart int64
			if len(moves) > 0 {
				movedStart = started[moves[0].Group]
			}
			if res.Event.Preemptions != 0 {
				t.Errorf("%d preemptions counted, want none: a move is no preemption", res.Event.Preemptions)
			}
			// The moved job never checkpoints: the move loses its 4 GPUs'
			// work since it started, and nothing else is lost.
			if e := res.Event; e.LostGPUHoursMoves != e.LostGPUHours || tc.wantMoves == 0 && e.LostGPUHours != 0 ||
				tc.wantMoves > 0 && !near(e.LostGPUHours, 4*float64(60-movedStart)/3600) {
				t.Errorf("lost %g GPU-hours, %g of them to moves; want 4 GPUs x %d s, all to the move", e.LostGPUHours, e.LostGPUHoursMoves, 60-movedStart)
			}
			if tc.wantMoves == 0 {
				if bigAt < 100000 {
					t.Fatalf("big bound at %d without moves, want after the jobs end", bigAt)
				}
				return
			}
			if m := moves[0]; m.For != "big" || m.At != 60 || m.Pods != 1 || m.GPUMilli != 4000 {
				t.Fatalf("move %+v, want one 4-GPU job moved for big at 60", m)
			}
			if bigAt != 61 || movedBound[moves[0].Group+"-0"] != 61 && movedBound[moves[0].Group] != 61 {
				t.Fatalf("big bound at %d and the moved job at %v; want both at 61, the cycle after the move", bigAt, movedBound)
			}
		})
	}
}

const elasticTrace = `
nodes:
- {name: n, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: A100}
pods:
- {name: el, count: 4, minMember: 2, gpus: 2, milliCPU: 1000, createdAt: 0, duration: 100000}
- {name: hi, gpus: 4, milliCPU: 1000, priority: 5, createdAt: 10, duration: 100}
`

// TestEventReplaysShrink: the elastic gang gives up two workers to the
// higher-priority pod, keeps the other two running, and grows back once
// the pod is done.
func TestEventReplaysShrink(t *testing.T) {
	tr, err := ReadYAMLTrace("elastic.yaml", strings.NewReader(elasticTrace))
	if err != nil {
		t.Fatal(err)
	}
	var shrunk []string
	regrown := int64(-1)
	cfg := EventConfig{Policy: placement.DefaultPolicy, Interval: 1,
		OnCycle: func(now int64, _ *model.Snapshot, d *model.Decisions) {
			for _, e := range d.Evictions {
				if !e.Shrink {
					t.Errorf("at %d: %s evicted whole, want a shrink", now, e.Pod)
				}
				shrunk = append(shrunk, e.Pod)
			}
			for _, b := range d.Binds {
				if len(shrunk) > 0 && b.Pod == shrunk[0] {
					regrown = now
				}
			}
		}}
	res, err := RunEvent(context.Background(), tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(shrunk) != 2 || res.Event.Preemptions != 2 {
		t.Fatalf("shrunk %v, %d preemptions; want two workers", shrunk, res.Event.Preemptions)
	}
	if regrown < 110 {
		t.Fatalf("%s bound again at %d, want once hi is done (110)", shrunk[0], regrown)
	}
}
