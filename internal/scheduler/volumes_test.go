package scheduler_test

import (
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// TestCycleBindsEachPVOnce: two pods of one cycle whose claims may each
// bind the one local PV of node n-1 (and provision nowhere) do not both
// take it; the one placed says which PV it binds, the other waits with the
// volume filter's reason, and once the decisions are applied it no longer
// counts on that PV.
func TestCycleBindsEachPVOnce(t *testing.T) {
	nodes := schedtest.Cluster("n", 3, 0, 64000, 1<<20)
	pv := model.PV{Name: "local", Nodes: []string{"n-1"}}
	withClaim := func(name, claim string) model.PodGroup {
		g := schedtest.Group(name).Pods(1, model.Request{MilliCPU: 100}).Obj()
		g.Pods[0].Request.Volumes = &model.PodVolumes{Claims: []model.ClaimNeed{{Claim: claim, PVs: []model.PV{pv}}}}
		g.Explain = true
		return g
	}
	snap := model.Snapshot{Nodes: nodes, Budget: model.DisruptionBudget{MaxEvictions: -1},
		Pending: []model.PodGroup{withClaim("a", "ns/a"), withClaim("b", "ns/b")}}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 1 {
		t.Fatalf("got %d binds %+v, want one: the PV serves one claim", len(d.Binds), d.Binds)
	}
	b := d.Binds[0]
	if b.Node != "n-1" || !slices.Equal(b.Volumes, []string{"local"}) {
		t.Fatalf("bind = %+v, want node n-1 binding PV local", b)
	}
	if len(d.Unplaced) != 1 || !slices.ContainsFunc(d.Unplaced[0].Filtered, func(f model.FilterCount) bool {
		return f.Filter == "no available persistent volume to bind" && f.Nodes == 3
	}) {
		t.Fatalf("unplaced = %+v, want the other group refused on all 3 nodes for want of a PV", d.Unplaced)
	}
	if err := model.Apply(&snap, &d, 1); err != nil {
		t.Fatal(err)
	}
	running := snap.RunningByNode[1][0]
	if running.Request.Volumes != nil {
		t.Fatalf("the bound pod still asks for claims: %+v", running.Request.Volumes)
	}
	if left := snap.Pending[0].Pods[0].Request.Volumes.Claims[0].PVs; len(left) != 0 {
		t.Fatalf("the waiting pod is still offered %v, bound to the other", left)
	}
	// The next cycle starts from the applied snapshot: nothing is bound
	// twice and nothing fails.
	d, err = s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 0 {
		t.Fatalf("second cycle bound %+v", d.Binds)
	}
}
