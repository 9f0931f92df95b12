package simulator

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

const migDemandTrace = `
nodes:
- {name: h100, milliCPU: 64000, memoryMiB: 1048576, gpus: 2, gpuModel: H100,
   migProfiles: [{name: 1g.10gb, slices: 1, instances: 7}, {name: 3g.40gb, slices: 3, instances: 2}]}
- {name: plain, milliCPU: 64000, memoryMiB: 1048576, gpus: 3, gpuModel: A100}
pods:
- {name: whole, count: 3, gpus: 1, gpuModels: [A100], milliCPU: 1000, createdAt: 0, duration: 100000}
- {name: small, count: 5, migProfile: 1g.10gb, milliCPU: 1000, createdAt: 100, duration: 1000}
`

// TestEventMIGLayoutFollowsDemand replays MIG layouts that follow demand:
// the MIG pods, which no GPU serves, are placed once the opted-in node's
// idle GPU is re-partitioned, LayoutDelay after the proposal, which came
// MinWait after they arrived; the node that does not opt in is never
// proposed for (its GPUs are busy), and nothing is evicted.
func TestEventMIGLayoutFollowsDemand(t *testing.T) {
	tr, err := ReadYAMLTrace("mig.yaml", strings.NewReader(migDemandTrace))
	if err != nil {
		t.Fatal(err)
	}
	var proposals []model.LayoutProposal
	bound := map[string]int64{}
	cfg := EventConfig{Policy: placement.DefaultPolicy, Interval: 1, Layouts: model.LayoutPolicy{MinWait: 10, Dwell: 300, Timeout: 120}, LayoutDelay: 5,
		OnCycle: func(now int64, _ *model.Snapshot, d *model.Decisions) {
			proposals = append(proposals, d.Layouts...)
			for _, b := range d.Binds {
				bound[b.Pod] = now
			}
			if len(d.Evictions) > 0 {
				t.Errorf("evictions at %d: %+v", now, d.Evictions)
			}
		}}
	res, err := RunEvent(context.Background(), tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(proposals) != 1 || proposals[0].Node != "h100" || !proposals[0].MIG || proposals[0].Devices["1g.10gb"] != 7 || proposals[0].At != 110 {
		t.Fatalf("proposals %+v, want one for h100 at t=110 (arrival 100 + MinWait 10)", proposals)
	}
	for i := range 5 {
		name := "small-" + string(rune('0'+i))
		if at, ok := bound[name]; !ok || at != 115 {
			t.Errorf("%s bound at %d (%v), want 115 (proposal + LayoutDelay 5)", name, at, ok)
		}
	}
	if res.Event.LayoutsProposed != 1 || res.Event.LayoutsApplied != 1 {
		t.Errorf("stats: %d proposed, %d applied, want 1 and 1", res.Event.LayoutsProposed, res.Event.LayoutsApplied)
	}
}

func TestReadYAMLTraceMIGProfiles(t *testing.T) {
	for _, tc := range []struct{ name, trace, want string }{
		{"bad profile", `nodes: [{name: n, milliCPU: 1, memoryMiB: 1, gpus: 1, migProfiles: [{name: big, slices: 1, instances: 1}]}]
pods: []`, "nodes[0].migProfiles[0]"},
		{"too many instances", `nodes: [{name: n, milliCPU: 1, memoryMiB: 1, gpus: 1, migProfiles: [{name: 3g.40gb, slices: 3, instances: 3}]}]
pods: []`, "nodes[0].migProfiles[0]"},
		{"bad pod profile", `nodes: [{name: n, milliCPU: 1, memoryMiB: 1, gpus: 1}]
pods: [{name: p, migProfile: huge}]`, "pods[0].migProfile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadYAMLTrace("t.yaml", strings.NewReader(tc.trace))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
