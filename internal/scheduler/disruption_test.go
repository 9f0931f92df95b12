package scheduler_test

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// A node about to go away evicts, whole, every group with a pod on it
// (not only that pod), whatever the disruption budget; it spares groups
// elsewhere and what nothing may evict; and it takes no new pod, so the
// gang is placed again whole on the other nodes.
func TestDisruptedNodeRequeuesItsGangsWhole(t *testing.T) {
	nodes := schedtest.Cluster("n", 4, 4, 64000, 1<<20)
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Budget: model.DisruptionBudget{MaxEvictions: 0}, Pending: []model.PodGroup{
		schedtest.Group("gang").MinMember(2).Pods(2, schedtest.GPU(4, 0)).Obj(),
		schedtest.Group("solo").Pods(1, schedtest.GPU(4, 0)).Obj(),
	}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 3 {
		t.Fatalf("binds %+v, want the gang and solo placed", d.Binds)
	}
	nodeOf := map[string]string{}
	for _, b := range d.Binds {
		nodeOf[b.Pod] = b.Node
	}
	gone := nodeOf["gang-0"]
	for i := range h.Snap.Nodes {
		if h.Snap.Nodes[i].Name == gone {
			h.Snap.Nodes[i].Disrupted = true
		}
	}
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	evicted := map[string]model.Eviction{}
	for _, e := range d.Evictions {
		evicted[e.Pod] = e
	}
	if len(evicted) != 2 {
		t.Fatalf("evictions %+v, want the gang's two pods, on %s and elsewhere", d.Evictions, gone)
	}
	for _, pod := range []string{"gang-0", "gang-1"} {
		if e, ok := evicted[pod]; !ok || e.Reason != model.EvictDisruption || e.For != "" {
			t.Errorf("%s: eviction %+v, want reason %s for no group", pod, e, model.EvictDisruption)
		}
	}
	// Evicted whole, it is placed again whole, never on the node going away.
	d, err = h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	placed := 0
	for _, b := range d.Binds {
		if b.Node == gone {
			t.Errorf("%s bound to %s, which is going away", b.Pod, gone)
		}
		if b.Group == "gang" {
			placed++
		}
	}
	if placed != 2 || len(d.Evictions) != 0 {
		t.Fatalf("binds %+v evictions %+v, want the gang placed again whole and nothing more evicted", d.Binds, d.Evictions)
	}
}

// Pods nothing may evict (another scheduler's, a PodDisruptionBudget's)
// stay on a node going away: whoever drains it stops them.
func TestDisruptionSparesNonPreemptible(t *testing.T) {
	nodes := schedtest.Cluster("n", 1, 4, 64000, 1<<20)
	nodes[0].Disrupted = true
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes,
		model.Allocation{Pod: "theirs", Group: "pod/theirs", Node: nodes[0].Name, Request: schedtest.GPU(1, 0), GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}, NonPreemptible: true})}
	h, err := schedtest.NewHarness(snap, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Evictions) != 0 {
		t.Fatalf("evictions %+v, want none", d.Evictions)
	}
}
