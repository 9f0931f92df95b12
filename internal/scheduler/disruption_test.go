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

// An elastic group that loses members on nodes going away keeps running
// when the members left keep its declared gang size: only the members on
// those nodes go (Eviction.Shrink), they wait in their group, and they
// rejoin it when room returns. Below its minimum, or declaring none, the
// group is evicted whole, as a gang is.
func TestDisruptedNodeShrinksElasticGroups(t *testing.T) {
	tests := []struct {
		name       string
		minMember  int
		disrupt    int // how many of the group's nodes go away
		wantShrink bool
	}{
		{name: "one node lost, the rest above the minimum", minMember: 2, disrupt: 1, wantShrink: true},
		{name: "two nodes lost, the rest exactly the minimum", minMember: 2, disrupt: 2, wantShrink: true},
		{name: "two nodes lost, the rest below the minimum", minMember: 3, disrupt: 2},
		{name: "a gang declaring no minimum", minMember: 0, disrupt: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Four nodes of 4 GPUs and four 4-GPU members: one per node,
			// and no room for a member anywhere else.
			nodes := schedtest.Cluster("n", 4, 4, 64000, 1<<20)
			g := schedtest.Group("el").Pods(4, schedtest.GPU(4, 0))
			if tc.minMember > 0 {
				g.MinMember(tc.minMember)
			}
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Budget: model.DisruptionBudget{MaxEvictions: 0}, Pending: []model.PodGroup{g.Obj()}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Binds) != 4 {
				t.Fatalf("binds %+v, want all four members", d.Binds)
			}
			gone := map[string]bool{}
			onGone := map[string]bool{}
			for _, b := range d.Binds[:tc.disrupt] {
				gone[b.Node], onGone[b.Pod] = true, true
			}
			for i := range h.Snap.Nodes {
				h.Snap.Nodes[i].Disrupted = gone[h.Snap.Nodes[i].Name]
			}
			if d, err = h.Cycle(); err != nil {
				t.Fatal(err)
			}
			want := 4
			if tc.wantShrink {
				want = tc.disrupt
			}
			if len(d.Evictions) != want {
				t.Fatalf("evictions %+v, want %d", d.Evictions, want)
			}
			for _, e := range d.Evictions {
				if e.Reason != model.EvictDisruption || e.For != "" || e.Shrink != tc.wantShrink {
					t.Errorf("eviction %+v, want reason %s for no group, shrink %v", e, model.EvictDisruption, tc.wantShrink)
				}
				if tc.wantShrink && !onGone[e.Pod] {
					t.Errorf("%s evicted from %s, which stays", e.Pod, e.Node)
				}
			}
			running := len(schedtest.Running(&h.Snap))
			if running != 4-want {
				t.Fatalf("%d members run after the eviction, want %d", running, 4-want)
			}
			if !tc.wantShrink {
				return
			}
			// The lost members wait: the nodes left are full and those
			// going away take nothing.
			if d, err = h.Cycle(); err != nil {
				t.Fatal(err)
			}
			if len(d.Binds) != 0 || len(d.Evictions) != 0 {
				t.Fatalf("binds %+v evictions %+v while no room returned, want none", d.Binds, d.Evictions)
			}
			// Room returns (the nodes come back): the group grows back to
			// all its members, and none of those that ran on was touched.
			for i := range h.Snap.Nodes {
				h.Snap.Nodes[i].Disrupted = false
			}
			if d, err = h.Cycle(); err != nil {
				t.Fatal(err)
			}
			if len(d.Binds) != tc.disrupt || len(d.Evictions) != 0 {
				t.Fatalf("binds %+v evictions %+v, want the %d lost members back and nothing evicted", d.Binds, d.Evictions, tc.disrupt)
			}
			for _, b := range d.Binds {
				if !onGone[b.Pod] {
					t.Errorf("%s bound again, but it never left", b.Pod)
				}
			}
			if n := len(schedtest.Running(&h.Snap)); n != 4 {
				t.Fatalf("%d members run, want all 4", n)
			}
		})
	}
}

// A preemptor held for its victims on a node that then goes away is not
// bound there: its plan no longer fits and it competes afresh.
func TestHoldOnANodeGoingAwayEnds(t *testing.T) {
	nodes := schedtest.Cluster("n", 2, 4, 64000, 1<<20)
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Budget: model.DisruptionBudget{MaxEvictions: -1}, Pending: []model.PodGroup{
		schedtest.Group("low-a").Pods(1, schedtest.GPU(4, 0)).Obj(),
		schedtest.Group("low-b").Pods(1, schedtest.GPU(4, 0)).Obj(),
	}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := h.Cycle(); err != nil || len(d.Binds) != 2 {
		t.Fatalf("binds %+v (%v), want both low groups placed", d.Binds, err)
	}
	h.Snap.Pending = append(h.Snap.Pending, schedtest.Group("high").Priority(10).Pods(1, schedtest.GPU(4, 0)).Obj())
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Holds) != 1 || len(d.Holds[0].Plan) != 1 {
		t.Fatalf("holds %+v, want high held for its victim", d.Holds)
	}
	gone := d.Holds[0].Plan[0].Node
	for i := range h.Snap.Nodes {
		h.Snap.Nodes[i].Disrupted = h.Snap.Nodes[i].Name == gone
	}
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	for _, b := range schedtest.Planned(&d) {
		if b.Node == gone {
			t.Fatalf("%s placed on %s, which is going away: binds %+v holds %+v", b.Pod, gone, d.Binds, d.Holds)
		}
	}
}
