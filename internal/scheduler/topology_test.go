package scheduler_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// fullNode is a pod of its own group holding all 8 GPUs of node.
func fullNode(pod string, node *model.Node, prio int32) model.Allocation {
	a := model.Allocation{Pod: pod, Group: pod, Queue: "a", Priority: prio, Node: node.Name, Request: schedtest.GPU(8, 1000)}
	for g := range 8 {
		a.GPUs = append(a.GPUs, model.GPUShare{Index: g, Milli: 1000})
	}
	return a
}

// busy fills the nodes named with one preemptible 8-GPU pod each, of
// priority 1 in queue a.
func busy(nodes []model.Node, names ...string) []model.Allocation {
	var out []model.Allocation
	for i := range nodes {
		if slices.Contains(names, nodes[i].Name) {
			out = append(out, fullNode("busy-"+nodes[i].Name, &nodes[i], 1))
		}
	}
	return out
}

// domainOf is the value of key on the node named.
func domainOf(nodes []model.Node, name, key string) string {
	for i := range nodes {
		if nodes[i].Name == name {
			return nodes[i].Domains[key]
		}
	}
	return ""
}

// domainsOf maps each group's binds (and held plans) to the values of key
// of their nodes, in pod order.
func domainsOf(nodes []model.Node, d *model.Decisions, key string) map[string][]string {
	out := map[string][]string{}
	for _, b := range schedtest.Planned(d) {
		out[b.Group] = append(out[b.Group], domainOf(nodes, b.Node, key))
	}
	return out
}

func distinct(vs []string) []string {
	out := slices.Clone(vs)
	slices.Sort(out)
	return slices.Compact(out)
}

func required(level string) model.GangTopology {
	return model.GangTopology{Levels: schedtest.TopologyLevels, Required: level}
}

func unplacedOf(d *model.Decisions, group string) *model.Unplaced {
	for i := range d.Unplaced {
		if d.Unplaced[i].Group == group {
			return &d.Unplaced[i]
		}
	}
	return nil
}

// TestRequiredLevelBestFit: a gang that requires a rack lands in one rack,
// the one with the least room that holds it, so that the emptier racks
// stay whole for larger gangs; one no rack holds waits, and its reason
// names the level and the rack that came closest.
func TestRequiredLevelBestFit(t *testing.T) {
	// One block of three racks of four 8-GPU nodes: rack r0 has 3 free
	// nodes, r1 has 2, r2 has 4.
	nodes := schedtest.TopologyCluster(1, 1, 3, 4, 8)
	run := busy(nodes, "z0-b0-r0-n0", "z0-b0-r1-n0", "z0-b0-r1-n1")
	rack := schedtest.RackKey
	for _, tc := range []struct {
		name string
		size int
		want string // the rack, or "" when it waits
	}{
		{"two nodes go to the rack with two free", 2, "z0-b0-r1"},
		{"three nodes go to the rack with three free", 3, "z0-b0-r0"},
		{"four nodes take the whole free rack", 4, "z0-b0-r2"},
		{"five nodes wait", 5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...),
				Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Topology(required(rack)).Pods(tc.size, schedtest.GPU(8, 1000)).Obj()}}
			d := cycleOnce(t, &snap)
			got := domainsOf(nodes, &d, rack)["g"]
			if tc.want == "" {
				u := unplacedOf(&d, "g")
				if len(got) != 0 || u == nil || u.Code != model.UnplacedNoDomain || u.Level != rack || u.Domain != "z0-b0-r2" ||
					u.Reason != "no rack (example.com/rack) has room for the gang's 5 pods of 8 GPUs each; the best rack, z0-b0-r2, has room for 4" {
					t.Fatalf("binds in %v, unplaced %+v: want the gang waiting, the best rack z0-b0-r2 named", got, u)
				}
				return
			}
			if len(got) != tc.size || len(distinct(got)) != 1 || got[0] != tc.want {
				t.Fatalf("gang of %d in racks %v, want all in %s", tc.size, got, tc.want)
			}
		})
	}
}

// TestGangWithoutTopologySpansRacks is the control: the five-node gang
// TestRequiredLevelBestFit keeps waiting places across racks without a
// topology.
func TestGangWithoutTopologySpansRacks(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 3, 4, 8)
	run := busy(nodes, "z0-b0-r0-n0", "z0-b0-r1-n0", "z0-b0-r1-n1")
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...),
		Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Pods(5, schedtest.GPU(8, 1000)).Obj()}}
	d := cycleOnce(t, &snap)
	if got := domainsOf(nodes, &d, schedtest.RackKey)["g"]; len(got) != 5 || len(distinct(got)) < 2 {
		t.Fatalf("gang in racks %v, want 5 pods over several racks", got)
	}
}

// TestPreferredLevel: a gang that prefers a rack gets one rack when one
// holds it, else one block with its racks filled largest first (as few
// racks as it can), else the zone, else anywhere.
func TestPreferredLevel(t *testing.T) {
	// Two blocks of three racks of four nodes; block b0's racks have 3, 2
	// and 4 free nodes, block b1's all 4.
	nodes := schedtest.TopologyCluster(1, 2, 3, 4, 8)
	run := busy(nodes, "z0-b0-r0-n0", "z0-b0-r1-n0", "z0-b0-r1-n1")
	pref := model.GangTopology{Levels: schedtest.TopologyLevels, Preferred: schedtest.RackKey}
	for _, tc := range []struct {
		name         string
		size         int
		block        string // "": more than one block
		racks        int
		largestFirst []string
	}{
		{"one rack, the best fit", 3, "z0-b0", 1, []string{"z0-b0-r0"}},
		{"one block, the fuller one, largest racks first", 6, "z0-b0", 2, []string{"z0-b0-r2", "z0-b0-r0"}},
		{"the emptier block when only it holds the gang", 10, "z0-b1", 3, nil},
		{"the zone when no block holds the gang", 20, "", 6, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...),
				Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Topology(pref).Pods(tc.size, schedtest.GPU(8, 1000)).Obj()}}
			d := cycleOnce(t, &snap)
			racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]
			blocks := distinct(domainsOf(nodes, &d, schedtest.BlockKey)["g"])
			if len(racks) != tc.size {
				t.Fatalf("%d pods placed, want %d", len(racks), tc.size)
			}
			if tc.block != "" && !reflect.DeepEqual(blocks, []string{tc.block}) || tc.block == "" && len(blocks) < 2 {
				t.Fatalf("gang in blocks %v, want %q", blocks, tc.block)
			}
			if got := distinct(racks); len(got) != tc.racks || tc.largestFirst != nil && !reflect.DeepEqual(got, distinct(tc.largestFirst)) {
				t.Fatalf("gang in racks %v, want %d racks %v", got, tc.racks, tc.largestFirst)
			}
		})
	}
}

// TestSlices: each slice lands inside one rack while the whole gang keeps
// its block; a slice no rack holds keeps the gang waiting, where the pods
// alone would fit.
func TestSlices(t *testing.T) {
	// Two blocks of four one-node racks; in block b0 racks r0 and r1 have
	// half their GPUs busy.
	nodes := schedtest.TopologyCluster(1, 2, 4, 1, 8)
	var run []model.Allocation
	for _, n := range []string{"z0-b0-r0-n0", "z0-b0-r1-n0"} {
		a := fullNode("half-"+n, &nodes[slices.IndexFunc(nodes, func(x model.Node) bool { return x.Name == n })], 1)
		a.Request, a.GPUs = schedtest.GPU(4, 1000), a.GPUs[:4]
		run = append(run, a)
	}
	half := schedtest.GPU(4, 1000)
	bySize := model.GangTopology{Levels: schedtest.TopologyLevels, Required: schedtest.BlockKey, SliceRequired: schedtest.RackKey, SliceSize: 2}
	byName := model.GangTopology{Levels: schedtest.TopologyLevels, SliceRequired: schedtest.RackKey}
	for _, tc := range []struct {
		name  string
		group model.PodGroup
		// wantSlices lists each slice's pods by index; nil: the gang waits.
		wantSlices [][]int
	}{
		{"slices of two in one rack each, in one block", schedtest.Group("g").Queue("a").Topology(bySize).Pods(6, half).Obj(), [][]int{{0, 1}, {2, 3}, {4, 5}}},
		{"named slices", schedtest.Group("g").Queue("a").Topology(byName).Pods(2, half).Slice(2, "w0").Pods(2, half).Slice(2, "w1").Obj(), [][]int{{0, 1}, {2, 3}}},
		{"a slice of three fits no one-node rack", schedtest.Group("g").Queue("a").Topology(byName).Pods(3, half).Slice(3, "w0").Obj(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Pending: []model.PodGroup{tc.group}}
			d := cycleOnce(t, &snap)
			racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]
			if tc.wantSlices == nil {
				u := unplacedOf(&d, "g")
				if len(racks) != 0 || u == nil || u.Code != model.UnplacedNoDomain || !strings.HasPrefix(u.Reason, "no rack (example.com/rack) has room for each slice") {
					t.Fatalf("placed in %v, unplaced %+v: want the gang waiting for a rack per slice", racks, u)
				}
				return
			}
			if len(racks) != len(tc.group.Pods) {
				t.Fatalf("%d of %d pods placed: %+v", len(racks), len(tc.group.Pods), d.Unplaced)
			}
			for _, sl := range tc.wantSlices {
				if r := racks[sl[0]]; slices.ContainsFunc(sl, func(k int) bool { return racks[k] != r }) {
					t.Fatalf("slice %v split over racks %v", sl, racks)
				}
			}
			if tc.group.Topology.Required != "" {
				if blocks := distinct(domainsOf(nodes, &d, schedtest.BlockKey)["g"]); len(blocks) != 1 {
					t.Fatalf("gang over blocks %v", blocks)
				}
			}
		})
	}
}

// TestInvalidTopologyWaitsAlone: a gang whose topology means nothing
// waits with the field named, and the groups behind it in its queue are
// placed.
func TestInvalidTopologyWaitsAlone(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 1, 2, 8)
	bad := model.GangTopology{Levels: schedtest.TopologyLevels, Required: "example.com/row"}
	snap := model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{
		schedtest.Group("bad").Queue("a").Created(1).Topology(bad).Pods(1, schedtest.GPU(1, 1000)).Obj(),
		schedtest.Group("next").Queue("a").Created(2).Pods(1, schedtest.GPU(1, 1000)).Obj(),
	}}
	d := cycleOnce(t, &snap)
	u := unplacedOf(&d, "bad")
	if u == nil || u.Code != model.UnplacedBadTopology || !strings.Contains(u.Reason, "topology.required") {
		t.Fatalf("unplaced %+v, want bad refused naming topology.required", d.Unplaced)
	}
	if len(d.Binds) != 1 || d.Binds[0].Group != "next" {
		t.Fatalf("binds %+v, want next placed", d.Binds)
	}
}

// TestPreemptionInsideOneDomain: a gang that requires a rack evicts only
// inside the one rack it then takes, and binds there once its victims are
// gone. A search over both racks would take the cheapest victim first,
// in the rack that can never hold the gang, and run out of the budget of
// two evictions before it freed a rack.
func TestPreemptionInsideOneDomain(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 2, 2, 8)
	// Rack r0: the cheapest victim (priority 1) and a node that cannot
	// be preempted; rack r1: two victims of priority 2.
	keep := fullNode("keep", &nodes[1], 50)
	keep.NonPreemptible = true
	run := []model.Allocation{fullNode("cheap", &nodes[0], 1), keep, fullNode("v2", &nodes[2], 2), fullNode("v3", &nodes[3], 2)}
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Queues: []model.Queue{{Name: "a"}},
		Budget: model.DisruptionBudget{MaxEvictions: 2},
		Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Priority(10).Topology(required(schedtest.RackKey)).
			Pods(2, schedtest.GPU(8, 1000)).Obj()}}
	h, err := schedtest.NewHarness(snap, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	var evicted []string
	for _, e := range d.Evictions {
		evicted = append(evicted, e.Pod)
	}
	slices.Sort(evicted)
	if !reflect.DeepEqual(evicted, []string{"v2", "v3"}) || len(d.Holds) != 1 {
		t.Fatalf("evicted %v, holds %+v: want v2 and v3 evicted for g", evicted, d.Holds)
	}
	if racks := distinct(domainsOf(nodes, &d, schedtest.RackKey)["g"]); !reflect.DeepEqual(racks, []string{"z0-b0-r1"}) {
		t.Fatalf("hold's plan in racks %v, want z0-b0-r1", racks)
	}
	d, err = h.Cycle() // the victims are gone (Apply removed them)
	if err != nil {
		t.Fatal(err)
	}
	if racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]; len(racks) != 2 || distinct(racks)[0] != "z0-b0-r1" || len(d.Binds) != 2 {
		t.Fatalf("binds %+v in racks %v, want g bound in z0-b0-r1", d.Binds, racks)
	}
}

// TestHoldDroppedWhenItsDomainChanges: a hold whose plan no longer lies in
// one rack (a node was relabelled while the victims exited) ends, and the
// group competes afresh.
func TestHoldDroppedWhenItsDomainChanges(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 2, 2, 8)
	run := []model.Allocation{fullNode("v0", &nodes[0], 1), fullNode("v1", &nodes[1], 1), fullNode("v2", &nodes[2], 1), fullNode("v3", &nodes[3], 1)}
	for i := range run[2:] {
		run[2+i].NonPreemptible = true // rack r1 stays as it is
	}
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Queues: []model.Queue{{Name: "a"}},
		Budget: model.DisruptionBudget{MaxEvictions: -1}, Now: 1,
		Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Priority(10).Topology(required(schedtest.RackKey)).
			Pods(2, schedtest.GPU(8, 1000)).Obj()}}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Holds) != 1 || len(d.Evictions) != 2 {
		t.Fatalf("holds %+v evictions %+v, want g waiting for v0 and v1", d.Holds, d.Evictions)
	}
	// One victim has exited; the other node moved to another rack.
	next := snap
	next.Holds, next.Now = d.Holds, 2
	next.Nodes = slices.Clone(nodes)
	next.Nodes[1].Domains = map[string]string{schedtest.ZoneKey: "z0", schedtest.BlockKey: "z0-b0", schedtest.RackKey: "elsewhere", schedtest.HostKey: nodes[1].Name}
	next.RunningByNode = schedtest.OnNodes(next.Nodes, run[1:]...)
	d2, err := s.Cycle(&next)
	if err != nil {
		t.Fatal(err)
	}
	if len(d2.Holds) != 0 || len(d2.Binds) != 0 {
		t.Fatalf("holds %+v binds %+v: want the hold ended, g not placed across racks", d2.Holds, d2.Binds)
	}
	// The same relabelling kept in one rack keeps the hold.
	next.Nodes[1].Domains = withLabel(nodes[0].Domains, schedtest.HostKey, nodes[1].Name)
	d3, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d3.Cycle(&snap); err != nil {
		t.Fatal(err)
	}
	d4, err := d3.Cycle(&next)
	if err != nil {
		t.Fatal(err)
	}
	if len(d4.Holds) != 1 {
		t.Fatalf("holds %+v, want g still waiting for v1", d4.Holds)
	}
}

// withLabel returns a copy of m with k set to v.
func withLabel(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range m {
		if key != k {
			out[key] = val
		}
	}
	return out
}

// TestRunningMembersPinTheDomain: the pods a partly running gang still
// needs join its running members' rack, though another rack fits as well.
func TestRunningMembersPinTheDomain(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 2, 4, 8)
	run := busy(nodes, "z0-b0-r0-n0", "z0-b0-r0-n1")
	for _, n := range []int{4, 5} {
		a := fullNode(fmt.Sprintf("g-%d", n-4), &nodes[n], 0)
		a.Group, a.MinMember = "g", 4
		run = append(run, a)
	}
	g := schedtest.Group("g").Queue("a").MinMember(4).Topology(required(schedtest.RackKey)).Pods(2, schedtest.GPU(8, 1000)).Obj()
	g.Pods[0].Name, g.Pods[1].Name, g.Placed = "g-2", "g-3", 2
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Pending: []model.PodGroup{g}}
	d := cycleOnce(t, &snap)
	if racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]; len(racks) != 2 || distinct(racks)[0] != "z0-b0-r1" {
		t.Fatalf("g's last pods in racks %v, want z0-b0-r1 beside its running pods", racks)
	}
}

// TestFragmentedDomainNamesThePodsToMove: when no rack holds the gang but
// one would were movable pods gone from it, the reason says which rack and
// which pods; pods that cannot move are never named.
func TestFragmentedDomainNamesThePodsToMove(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 2, 2, 8)
	// Rack r0: n0 runs what the case says, n1 is free; rack r1: n2 runs
	// a pod that cannot move, n3 is free.
	fixed := fullNode("fixed", &nodes[2], 1)
	fixed.NonPreemptible = true
	for _, tc := range []struct {
		name     string
		run      []model.Allocation
		code     string
		movable  []string
		endsWith string
	}{
		{
			name: "a preemptible pod in the way",
			run:  []model.Allocation{fullNode("low", &nodes[0], 1), fixed},
			code: model.UnplacedFragmentedDomain, movable: []string{"low"},
			endsWith: "; rack z0-b0-r0 would have room were these movable pods moved: low",
		},
		{
			name: "only pods that cannot move",
			run:  []model.Allocation{fullNode("high", &nodes[0], 20), fixed},
			code: model.UnplacedNoDomain,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, tc.run...), Queues: []model.Queue{{Name: "a"}},
				Budget: model.DisruptionBudget{MaxEvictions: 0},
				Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Priority(10).Topology(required(schedtest.RackKey)).
					Pods(2, schedtest.GPU(8, 1000)).Obj()}}
			d := cycleOnce(t, &snap)
			u := unplacedOf(&d, "g")
			if u == nil || u.Code != tc.code || !reflect.DeepEqual(u.Movable, tc.movable) || !strings.HasSuffix(u.Reason, tc.endsWith) ||
				!strings.HasPrefix(u.Reason, "no rack (example.com/rack) has room for the gang's 2 pods of 8 GPUs each; the best rack, ") {
				t.Fatalf("unplaced %+v, want code %s, movable %v, reason ending %q", u, tc.code, tc.movable, tc.endsWith)
			}
		})
	}
}

// TestSmallPodsKeepDomainsWhole: once the scheduler knows the racks (a
// gang named them), a pod without a topology that every idle node serves
// alike goes to the rack already in use, not to the first idle node by
// name, which would split a whole rack.
func TestSmallPodsKeepDomainsWhole(t *testing.T) {
	// Nodes named so that their order interleaves the racks: a0 and a1 in
	// rack A, b0 and b1 in rack B, in the order a0, b0, a1, b1.
	var nodes []model.Node
	for _, n := range []struct{ name, rack string }{{"n0-a0", "A"}, {"n1-b0", "B"}, {"n2-a1", "A"}, {"n3-b1", "B"}} {
		node := schedtest.Node(n.name, 64000, 1<<20).GPUs(4, "H100").Obj()
		node.Domains = map[string]string{schedtest.RackKey: n.rack, schedtest.HostKey: n.name}
		nodes = append(nodes, node)
	}
	levels := []string{schedtest.RackKey, schedtest.HostKey}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	snap := model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{
		schedtest.Group("gang").Topology(model.GangTopology{Levels: levels, Required: schedtest.RackKey}).Pods(1, schedtest.GPU(1, 1000)).Obj()}}
	d, err := s.Cycle(&snap)
	if err != nil || len(d.Binds) != 1 || d.Binds[0].Node != "n0-a0" {
		t.Fatalf("binds %+v (%v), want the gang on n0-a0", d.Binds, err)
	}
	if err := model.Apply(&snap, &d, 1); err != nil {
		t.Fatal(err)
	}
	// A pod of four GPUs: n0-a0 has three left; n1-b0, n2-a1 and n3-b1
	// are idle and score alike.
	snap.Pending = []model.PodGroup{schedtest.Group("small").Pods(1, schedtest.GPU(4, 1000)).Obj()}
	d, err = s.Cycle(&snap)
	if err != nil || len(d.Binds) != 1 || d.Binds[0].Node != "n2-a1" {
		t.Fatalf("binds %+v (%v), want small on n2-a1, in rack A, leaving rack B whole", d.Binds, err)
	}
}

// TestMovablePodsListIsBounded: a domain fragmented by many small pods
// names 16 of them and counts the rest.
func TestMovablePodsListIsBounded(t *testing.T) {
	// Two racks of three nodes; every GPU of rack r0 holds a preemptible
	// one-GPU pod, rack r1 has a node that cannot be preempted.
	nodes := schedtest.TopologyCluster(1, 1, 2, 3, 8)
	var run []model.Allocation
	for n := range 3 {
		for g := range 8 {
			pod := fmt.Sprintf("small-%d-%d", n, g)
			run = append(run, model.Allocation{Pod: pod, Group: pod, Queue: "a", Priority: 1, Node: nodes[n].Name,
				Request: schedtest.GPU(1, 1000), GPUs: []model.GPUShare{{Index: g, Milli: 1000}}})
		}
	}
	fixed := fullNode("fixed", &nodes[3], 1)
	fixed.NonPreemptible = true
	run = append(run, fixed)
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Queues: []model.Queue{{Name: "a"}},
		Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Priority(10).Topology(required(schedtest.RackKey)).
			Pods(3, schedtest.GPU(8, 1000)).Obj()}}
	d := cycleOnce(t, &snap)
	u := unplacedOf(&d, "g")
	if u == nil || u.Code != model.UnplacedFragmentedDomain || u.Domain != "z0-b0-r0" || len(u.Movable) != 16 || u.MovableMore != 8 ||
		!strings.HasSuffix(u.Reason, " and 8 more") {
		t.Fatalf("unplaced %+v, want rack z0-b0-r0 with 16 of its 24 pods named and 8 more counted", u)
	}
}

// TestRequiredAndPreferred: a gang that requires a block and prefers a
// rack takes the block that fits it best, its fullest racks first, and
// never a second block, however much room the zone has.
func TestRequiredAndPreferred(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 2, 3, 4, 8)
	run := busy(nodes, "z0-b0-r0-n0", "z0-b0-r1-n0", "z0-b0-r1-n1")
	tp := model.GangTopology{Levels: schedtest.TopologyLevels, Required: schedtest.BlockKey, Preferred: schedtest.RackKey}
	for _, tc := range []struct {
		name  string
		size  int
		racks []string // nil: the gang waits
	}{
		{"one rack when one holds it", 4, []string{"z0-b0-r2"}},
		{"the fuller block, its largest racks first", 6, []string{"z0-b0-r0", "z0-b0-r2"}},
		{"thirteen pods fit no block", 13, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...),
				Pending: []model.PodGroup{schedtest.Group("g").Queue("a").Topology(tp).Pods(tc.size, schedtest.GPU(8, 1000)).Obj()}}
			d := cycleOnce(t, &snap)
			racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]
			if tc.racks == nil {
				u := unplacedOf(&d, "g")
				if len(racks) != 0 || u == nil || u.Code != model.UnplacedNoDomain ||
					u.Reason != "no block (example.com/block) has room for the gang's 13 pods of 8 GPUs each; the best block, z0-b1, has room for 12" {
					t.Fatalf("placed in %v, unplaced %+v: want the gang waiting for a block", racks, u)
				}
				return
			}
			if len(racks) != tc.size || !reflect.DeepEqual(distinct(racks), tc.racks) {
				t.Fatalf("gang in racks %v, want %d pods in %v", racks, tc.size, tc.racks)
			}
		})
	}
}

// TestTopologyGangWithAlternatives: a gang of pods whose claims list
// alternatives (firstAvailable) inside one rack takes, pod by pod, the
// first alternative that places in the rack, and binds say which. Rack r0
// has two half-free nodes, r1 one whole free node: two pods of "8 GPUs,
// else 4" fit only in r0, each on its second alternative.
func TestTopologyGangWithAlternatives(t *testing.T) {
	nodes := schedtest.TopologyCluster(1, 1, 2, 2, 8)
	run := busy(nodes, "z0-b0-r1-n0")
	for _, name := range []string{"z0-b0-r0-n0", "z0-b0-r0-n1"} {
		a := model.Allocation{Pod: "half-" + name, Group: "half-" + name, Queue: "a", Priority: 1, Node: name, Request: schedtest.GPU(4, 1000)}
		for g := range 4 {
			a.GPUs = append(a.GPUs, model.GPUShare{Index: g, Milli: 1000})
		}
		run = append(run, a)
	}
	alt := func(gpus int) model.Request { r := schedtest.GPU(gpus, 1000); r.MilliCPU = 1000; return r }
	g := schedtest.Group("g").Queue("a").Topology(required(schedtest.RackKey)).Pods(2, firstOf(alt(8), alt(4))).Obj()
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Pending: []model.PodGroup{g}}
	d := cycleOnce(t, &snap)
	if got := domainsOf(nodes, &d, schedtest.RackKey)["g"]; len(got) != 2 || len(distinct(got)) != 1 || got[0] != "z0-b0-r0" {
		t.Fatalf("gang in racks %v (unplaced %+v), want both pods in z0-b0-r0", got, d.Unplaced)
	}
	for _, b := range d.Binds {
		if b.Alternative != 1 || len(b.GPUs) != 4 {
			t.Errorf("pod %s bound with alternative %d and %d GPUs, want alternative 1 and 4 GPUs", b.Pod, b.Alternative, len(b.GPUs))
		}
	}
}

// TestRunningSliceMembersPinTheirSlice: in a gang partly running, the
// pods a slice still needs join the slice's running members in their
// rack, though a tighter rack (which best fit takes otherwise) holds them
// too; a slice whose running members sit in two racks cannot be kept
// whole, and the gang waits.
func TestRunningSliceMembersPinTheirSlice(t *testing.T) {
	// One block of three racks of two 8-GPU nodes; each rack's first node
	// is taken but for r1's, where one pod of g's slice w0 runs.
	nodes := schedtest.TopologyCluster(1, 1, 3, 2, 8)
	half := schedtest.GPU(4, 1000)
	member := func(pod, node string, gpu0 int) model.Allocation {
		a := model.Allocation{Pod: pod, Group: "g", Queue: "a", Node: node, Request: half, Slice: "w0"}
		for g := gpu0; g < gpu0+4; g++ {
			a.GPUs = append(a.GPUs, model.GPUShare{Index: g, Milli: 1000})
		}
		return a
	}
	topo := model.GangTopology{Levels: schedtest.TopologyLevels, Required: schedtest.BlockKey, SliceRequired: schedtest.RackKey}
	for _, tc := range []struct {
		name string
		run  []model.Allocation
		// wantRack is the rack of w0's pending pod; "" for the gang
		// waiting.
		wantRack string
	}{
		{"the slice's rack", append(busy(nodes, "z0-b0-r0-n0", "z0-b0-r2-n0"), member("g-0", "z0-b0-r1-n0", 0)), "z0-b0-r1"},
		{"a slice split already", append(busy(nodes, "z0-b0-r0-n0"), member("g-0", "z0-b0-r1-n0", 0), member("g-x", "z0-b0-r2-n0", 0)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			placed := 0
			for _, a := range tc.run {
				if a.Group == "g" {
					placed++
				}
			}
			// Every pending pod is needed.
			g := schedtest.Group("g").Queue("a").MinMember(placed+3).Topology(topo).Pods(1, half).Slice(1, "w0").Pods(2, half).Slice(2, "w1").Obj()
			g.Pods[0].Name, g.Pods[1].Name, g.Pods[2].Name = "g-1", "g-2", "g-3"
			g.Placed = placed
			snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, tc.run...), Pending: []model.PodGroup{g}}
			d := cycleOnce(t, &snap)
			racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]
			if tc.wantRack == "" {
				if len(racks) != 0 {
					t.Fatalf("g placed in racks %v: its slice w0 runs in two racks already", racks)
				}
				u := unplacedOf(&d, "g")
				if u == nil || u.Code != model.UnplacedNoDomain || u.Level != schedtest.RackKey ||
					!strings.HasPrefix(u.Reason, "the running pods of its slice w0 are not all in one rack (example.com/rack)") {
					t.Fatalf("unplaced %+v: want the reason to name sub-group w0 and the rack level", u)
				}
				return
			}
			if len(racks) != 3 || racks[0] != tc.wantRack || racks[1] != racks[2] {
				t.Fatalf("g's pods in racks %v (w0's pod first), want w0's in %s beside its running pod and w1 in one rack; unplaced %+v", racks, tc.wantRack, d.Unplaced)
			}
		})
	}
}

// TestRunningSizeSliceMembersPinTheirSlice: in a gang sliced by size whose
// pods name their slices (by rank), a replacement joins its slice's
// running member in its rack, though a tighter rack holds it too, and the
// slice with no running member is placed whole anywhere in the block.
func TestRunningSizeSliceMembersPinTheirSlice(t *testing.T) {
	// One block of three racks of two 8-GPU nodes; each rack's first node
	// is taken but for r1's, where g-0 of slice #0 runs.
	nodes := schedtest.TopologyCluster(1, 1, 3, 2, 8)
	half := schedtest.GPU(4, 1000)
	run := append(busy(nodes, "z0-b0-r0-n0", "z0-b0-r2-n0"), model.Allocation{Pod: "g-0", Group: "g", Queue: "a", Node: "z0-b0-r1-n0", Request: half, Slice: "#0",
		GPUs: []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}, {Index: 2, Milli: 1000}, {Index: 3, Milli: 1000}}})
	topo := model.GangTopology{Levels: schedtest.TopologyLevels, Required: schedtest.BlockKey, SliceRequired: schedtest.RackKey, SliceSize: 2}
	g := schedtest.Group("g").Queue("a").MinMember(4).Topology(topo).Pods(1, half).Slice(1, "#0").Pods(2, half).Slice(2, "#1").Obj()
	g.Pods[0].Name, g.Pods[1].Name, g.Pods[2].Name = "g-1", "g-2", "g-3"
	g.Placed = 1
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Pending: []model.PodGroup{g}}
	d := cycleOnce(t, &snap)
	racks := domainsOf(nodes, &d, schedtest.RackKey)["g"]
	if len(racks) != 3 || racks[0] != "z0-b0-r1" || racks[1] != racks[2] {
		t.Fatalf("g's pods in racks %v (g-1 first), want g-1 in z0-b0-r1 beside g-0 of its slice and g-2, g-3 in one rack; unplaced %+v", racks, d.Unplaced)
	}
}
