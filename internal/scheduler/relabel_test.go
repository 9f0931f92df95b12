package scheduler_test

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// poolKey is a label pods select nodes by (model.Request.NodeSelector).
const poolKey = "pool"

// relabel changes node n's labels or domains as a labeller would: its zone
// moves (in Labels or in Domains, where the adapter passes topology
// keys), goes or comes back, or its pool changes.
func relabel(t *rapid.T, n *model.Node, zones int) {
	labels, domains := maps.Clone(n.Labels), maps.Clone(n.Domains)
	if domains == nil {
		domains = map[string]string{}
	}
	switch rapid.IntRange(0, 3).Draw(t, "relabel") {
	case 0:
		labels[zoneKey] = fmt.Sprintf("z%d", rapid.IntRange(0, zones).Draw(t, "zone"))
		delete(domains, zoneKey)
	case 1:
		domains[zoneKey] = fmt.Sprintf("z%d", rapid.IntRange(0, zones).Draw(t, "zone"))
	case 2:
		delete(labels, zoneKey)
		delete(domains, zoneKey)
	default:
		if labels[poolKey] == "" {
			labels[poolKey] = "x"
		} else {
			delete(labels, poolKey)
		}
	}
	n.Labels, n.Domains = labels, domains
}

// TestPropertyRelabelMatchesFresh: nodes whose labels and topology domains
// change between cycles, under running pods with labels and affinity
// terms and pending pods with affinity, anti-affinity, spread and node
// selectors, are patched in place: the scheduler keeps its state (it is
// not rebuilt), holds the free state and decides exactly what a new
// scheduler given the same snapshot does.
func TestPropertyRelabelMatchesFresh(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		zones := rapid.IntRange(1, 3).Draw(t, "zones")
		nodes := zonedNodes(rapid.IntRange(2, 6).Draw(t, "nodes"), zones, 2)
		for i := range nodes {
			// The hostname is a domain, as the adapter passes it.
			nodes[i].Domains = map[string]string{hostKey: nodes[i].Name}
			delete(nodes[i].Labels, hostKey)
		}
		h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes}, scheduler.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var st any
		next := 0
		for cycle := range 5 {
			if cycle > 0 {
				h.Snap.Nodes = append([]model.Node(nil), h.Snap.Nodes...)
				for range rapid.IntRange(1, 3).Draw(t, "relabels") {
					relabel(t, &h.Snap.Nodes[rapid.IntRange(0, len(nodes)-1).Draw(t, "node")], zones)
				}
			}
			for range rapid.IntRange(0, 3).Draw(t, "arrive") {
				next++
				req := genConstrainedRequest(t)
				if rapid.IntRange(0, 3).Draw(t, "selector") == 0 {
					req.NodeSelector = map[string]string{poolKey: "x"}
				}
				h.Snap.Pending = append(h.Snap.Pending, schedtest.Group(fmt.Sprintf("g%d", next)).Created(int64(next)).
					Pods(rapid.IntRange(1, 2).Draw(t, "size"), req).Obj())
			}
			snap := h.Snap
			got, err := h.Sched.Cycle(&snap)
			if err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			if cycle == 0 {
				st = scheduler.StateOf(h.Sched)
			} else if any(scheduler.StateOf(h.Sched)) != st {
				t.Fatalf("cycle %d: relabelled nodes rebuilt the scheduler's state", cycle)
			}
			fresh, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := fresh.Cycle(&snap)
			if err != nil {
				t.Fatalf("cycle %d, new scheduler: %v", cycle, err)
			}
			got.Timings, want.Timings = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("cycle %d: the scheduler decided\n%+v\na new one decides\n%+v", cycle, got, want)
			}
			sameFreeState(t, scheduler.StateOf(h.Sched), scheduler.StateOf(fresh))
			if err := model.Apply(&h.Snap, &got, int64(cycle+1)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestRelabelMovesTopologyDomains: a node moved to another rack by its
// labels is in that rack for the next gang placed by the network, with
// the state patched, not rebuilt: two racks of two nodes, one rack filled
// by a gang, then a node of the other moved into the full one leaves no
// rack with room for a second gang of two whole nodes.
func TestRelabelMovesTopologyDomains(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 2, 2, 8)
	topo := model.GangTopology{Levels: schedtest.TopologyLevels, Required: schedtest.RackKey}
	gang := func(name string) model.PodGroup {
		return schedtest.Group(name).MinMember(2).Pods(2, schedtest.GPU(8, 1000)).Topology(topo).Obj()
	}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{gang("a")}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 2 || d.Binds[0].Node != "z0-b0-r0-n0" || d.Binds[1].Node != "z0-b0-r0-n1" {
		t.Fatalf("gang a bound %+v, want rack z0-b0-r0's two nodes", d.Binds)
	}
	st := scheduler.StateOf(h.Sched)
	h.Snap.Nodes = append([]model.Node(nil), h.Snap.Nodes...)
	moved := &h.Snap.Nodes[2]
	moved.Domains = maps.Clone(moved.Domains)
	moved.Domains[schedtest.RackKey] = "z0-b0-r0"
	h.Snap.Pending = append(h.Snap.Pending, gang("b"))
	snap := h.Snap
	d, err = h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if scheduler.StateOf(h.Sched) != st {
		t.Error("a relabelled node rebuilt the scheduler's state")
	}
	if len(d.Binds) != 0 {
		t.Errorf("gang b bound %+v after its rack lost a node, want none", d.Binds)
	}
	fresh, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := fresh.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	d.Timings, want.Timings = nil, nil
	if !reflect.DeepEqual(d, want) {
		t.Errorf("the scheduler decided\n%+v\na new one decides\n%+v", d, want)
	}
}
