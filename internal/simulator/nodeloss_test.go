package simulator

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Four 8-GPU nodes, a rigid gang and an elastic group each one pod per
// node, both checkpointing every ten minutes, and lone pods after them.
const spotTrace = `
nodes:
- {name: n, count: 4, milliCPU: 64000, memoryMiB: 1048576, gpus: 8, gpuModel: A100}
pods:
- {name: rigid, count: 2, minMember: 2, gpus: 8, milliCPU: 1000, createdAt: 0, duration: 36000, checkpointEvery: 600}
- {name: elastic, count: 2, minMember: 1, gpus: 8, milliCPU: 1000, createdAt: 0, duration: 36000, checkpointEvery: 600}
- {name: solo, count: 4, gpus: 4, milliCPU: 1000, createdAt: 40000, duration: 3600}
`

// An event run with spot nodes: reclaimed nodes give notice and go, and
// come back; the core requeues the rigid gang whole and shrinks the
// elastic group that keeps its minimum; what they lose is counted apart
// from preemption, as GPUs times the time since each pod's last
// checkpoint; every job still completes.
func TestEventSpotNodesReclaimed(t *testing.T) {
	tr, err := ReadYAMLTrace("spot.yaml", strings.NewReader(spotTrace))
	if err != nil {
		t.Fatal(err)
	}
	loss := NodeLoss{SpotFraction: 1, ReclaimPerHour: 0.5, Notice: 120, ReturnAfter: 1800}
	// What the cycles show, counted here on the core's decisions alone.
	var (
		runStart    = map[string]int64{}
		gpus        = map[string]int64{}
		lostMilliS  float64
		pods, gangs int
		shrunk      int
		fewest      = math.MaxInt
		wholeRigid  int
	)
	cfg := EventConfig{Policy: placement.DefaultPolicy, Seed: 7, Interval: 30, NodeLoss: loss,
		OnCycle: func(now int64, snap *model.Snapshot, d *model.Decisions) {
			disrupted := map[string]bool{}
			for i := range snap.Nodes {
				disrupted[snap.Nodes[i].Name] = snap.Nodes[i].Disrupted
			}
			fewest = min(fewest, len(snap.Nodes))
			for _, b := range d.Binds {
				if disrupted[b.Node] {
					t.Errorf("at %d: %s bound to %s, which is going away", now, b.Pod, b.Node)
				}
				runStart[b.Pod] = now
				gpus[b.Pod] = int64(len(b.GPUs)) * model.MilliPerGPU
			}
			hit, shrinks := map[string]int{}, map[string]bool{}
			for _, e := range d.Evictions {
				if e.Reason != model.EvictDisruption {
					t.Errorf("at %d: %s evicted for %s (%s), want only node loss here", now, e.Pod, e.For, e.Reason)
					continue
				}
				pods++
				hit[e.Group]++
				if e.Shrink {
					shrinks[e.Group] = true
					if !disrupted[e.Node] {
						t.Errorf("at %d: elastic %s shrunk off %s, which stays", now, e.Pod, e.Node)
					}
				}
				start := runStart[e.Pod]
				ck := start // solo saves nothing: it loses its whole run
				if !strings.HasPrefix(e.Pod, "solo") {
					ck += (now - start) / 600 * 600
				}
				lostMilliS += float64(gpus[e.Pod]) * float64(now-ck)
			}
			gangs += len(hit)
			shrunk += len(shrinks)
			if hit["rigid"] > 0 {
				wholeRigid++
				if hit["rigid"] != 2 || shrinks["rigid"] {
					t.Errorf("at %d: rigid lost %d pods (shrink %v), want both, whole", now, hit["rigid"], shrinks["rigid"])
				}
			}
		}}
	res, err := RunEvent(context.Background(), tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ev := res.Event
	t.Logf("spot nodes %d, lost %d, pods hit %d, gangs %d, shrunk %d, lost GPU-h %.2f, jobs %d/%d", ev.SpotNodes, ev.NodesLost,
		ev.NodeLossPods, ev.NodeLossGangs, ev.NodeLossShrunk, ev.LostGPUHoursNodeLoss, ev.JobsCompleted, ev.Jobs)
	if ev.SpotNodes != 4 || ev.NodesLost == 0 || fewest >= 4 {
		t.Fatalf("%d spot nodes, %d lost, at least %d listed: want 4 spot nodes, some lost and gone from the snapshot", ev.SpotNodes, ev.NodesLost, fewest)
	}
	if ev.NodeLossPods != pods || ev.NodeLossGangs != gangs || ev.NodeLossShrunk != shrunk {
		t.Errorf("counted %d pods, %d gangs, %d shrunk; the core's decisions show %d, %d, %d", ev.NodeLossPods, ev.NodeLossGangs, ev.NodeLossShrunk, pods, gangs, shrunk)
	}
	if shrunk == 0 || wholeRigid == 0 {
		t.Fatalf("elastic shrank %d times, rigid requeued whole %d times: the seed should show both", shrunk, wholeRigid)
	}
	want := lostMilliS / model.MilliPerGPU / 3600
	if want == 0 || math.Abs(ev.LostGPUHoursNodeLoss-want) > 1e-9 {
		t.Errorf("GPU-hours lost to node loss %g, want %g", ev.LostGPUHoursNodeLoss, want)
	}
	if ev.Preemptions != 0 || ev.LostGPUHours != 0 {
		t.Errorf("%d preemptions losing %g GPU-hours, want none: node loss is counted apart", ev.Preemptions, ev.LostGPUHours)
	}
	if ev.JobsCompleted != ev.Jobs {
		t.Errorf("%d of %d jobs completed, want all: lost nodes come back", ev.JobsCompleted, ev.Jobs)
	}

	// The same seed loses the same nodes at the same times.
	cfg.OnCycle = nil
	again, err := RunEvent(context.Background(), tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a := again.Event; a.NodesLost != ev.NodesLost || a.NodeLossPods != ev.NodeLossPods || a.LostGPUHoursNodeLoss != ev.LostGPUHoursNodeLoss || a.JCTMean != ev.JCTMean {
		t.Errorf("seed %d again: %+v, first %+v", cfg.Seed, a, ev)
	}
	// Without spot nodes nothing is lost.
	cfg.NodeLoss = NodeLoss{}
	none, err := RunEvent(context.Background(), tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := none.Event; n.SpotNodes != 0 || n.NodesLost != 0 || n.NodeLossPods != 0 || n.LostGPUHoursNodeLoss != 0 {
		t.Errorf("without node loss: %+v", n)
	}
}

// A node that never returns leaves its groups waiting, and the run ends
// with them unplaced rather than waiting for it forever.
func TestEventSpotNodesNeverReturn(t *testing.T) {
	tr, err := ReadYAMLTrace("spot.yaml", strings.NewReader(spotTrace))
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunEvent(context.Background(), tr, EventConfig{Policy: placement.DefaultPolicy, Seed: 7, Interval: 30,
		NodeLoss: NodeLoss{SpotFraction: 1, ReclaimPerHour: 2, Notice: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if ev := res.Event; ev.NodesLost != 4 || ev.JobsCompleted == ev.Jobs {
		t.Fatalf("%d nodes lost, %d of %d jobs completed: want all four lost for good and work left undone", ev.NodesLost, ev.JobsCompleted, ev.Jobs)
	}
}

func TestNodeLossCheck(t *testing.T) {
	tests := []struct {
		name string
		nl   NodeLoss
		want string
	}{
		{"fraction above one", NodeLoss{SpotFraction: 1.5, ReclaimPerHour: 1}, "nodeLoss.spotFraction"},
		{"negative rate", NodeLoss{SpotFraction: 0.5, ReclaimPerHour: -1}, "nodeLoss.reclaimPerHour"},
		{"infinite rate", NodeLoss{SpotFraction: 0.5, ReclaimPerHour: math.Inf(1)}, "nodeLoss.reclaimPerHour"},
		{"negative notice", NodeLoss{Notice: -1}, "nodeLoss.notice"},
		{"negative return", NodeLoss{ReturnAfter: -5}, "nodeLoss.returnAfter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.nl.Check("nodeLoss")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if err := (NodeLoss{SpotFraction: 0.3, ReclaimPerHour: 0.1, Notice: 120, ReturnAfter: 600}).Check("nodeLoss"); err != nil {
		t.Fatal(err)
	}
}

// advance, step by step on one spot node: notice (Disrupted, still
// listed), then, once a cycle saw the notice and the notice ran out, the
// node leaves the snapshot with what still ran on it handed to lose, and
// it comes back empty after ReturnAfter; the other nodes and their pods
// stay aligned throughout.
func TestNodeLossAdvance(t *testing.T) {
	nodes := []model.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	nl := newNodeLoss(NodeLoss{SpotFraction: 1, ReclaimPerHour: 1, Notice: 60, ReturnAfter: 600}, nodes, 1, 0)
	// Only b is spot, reclaimed at 100.
	nl.spots = []*spotNode{{node: nodes[1], orig: 1, reclaimAt: 100}}
	onA := model.Allocation{Pod: "x", Group: "gx", Node: "a"}
	onB := model.Allocation{Pod: "y", Group: "gy", Node: "b"}
	snap := model.Snapshot{Nodes: slices.Clone(nodes), RunningByNode: [][]model.Allocation{{onA}, {onB}, nil}}
	var lost []model.Allocation
	lose := func(r []model.Allocation) error { lost = append(lost, r...); return nil }
	step := func(now int64) {
		t.Helper()
		if err := nl.advance(&snap, now, lose); err != nil {
			t.Fatal(err)
		}
		if len(snap.RunningByNode) != len(snap.Nodes) {
			t.Fatalf("at %d: %d chunks for %d nodes", now, len(snap.RunningByNode), len(snap.Nodes))
		}
	}
	step(99)
	if snap.Nodes[1].Disrupted {
		t.Fatal("b disrupted before its reclaim")
	}
	step(100)
	if !snap.Nodes[1].Disrupted || snap.Nodes[0].Disrupted || nodes[1].Disrupted {
		t.Fatalf("nodes %+v (the run's own %+v): want b alone disrupted, in a new slice", snap.Nodes, nodes)
	}
	// The notice ran out, but no cycle has seen it: b stays.
	step(200)
	if len(snap.Nodes) != 3 {
		t.Fatalf("b left before a cycle saw its notice: %+v", snap.Nodes)
	}
	nl.cycled(&model.Decisions{})
	step(200)
	if len(snap.Nodes) != 2 || snap.Nodes[0].Name != "a" || snap.Nodes[1].Name != "c" || snap.RunningByNode[0][0].Pod != "x" {
		t.Fatalf("after b went: nodes %+v running %+v", snap.Nodes, snap.RunningByNode)
	}
	if len(lost) != 1 || lost[0].Pod != "y" || nl.nodesLost != 1 {
		t.Fatalf("lost %+v, %d nodes lost: want y with b", lost, nl.nodesLost)
	}
	if w := nl.wake(math.MaxInt64, true); w != 800 {
		t.Fatalf("wake %d with groups waiting, want b's return at 800", w)
	}
	if w := nl.wake(math.MaxInt64, false); w != math.MaxInt64 {
		t.Fatalf("wake %d with nothing waiting, want none", w)
	}
	step(800)
	if len(snap.Nodes) != 3 || snap.Nodes[2].Name != "b" || snap.Nodes[2].Disrupted || len(snap.RunningByNode[2]) != 0 {
		t.Fatalf("after b came back: nodes %+v running %+v", snap.Nodes, snap.RunningByNode)
	}
	if s := nl.spots[0]; s.state != spotInService || s.reclaimAt <= 800 {
		t.Fatalf("b back as %+v, want in service with its next reclaim drawn after 800", s)
	}
	if i := nl.original("b", 2); i != 1 {
		t.Fatalf("b's index among the run's nodes %d, want 1", i)
	}
}
