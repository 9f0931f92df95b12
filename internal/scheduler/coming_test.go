package scheduler_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// A node that has yet to register its GPUs counts as coming: a group that
// fits once it is up waits for it, not for capacity (so no autoscaler buys
// another node for it), and nothing is bound to it before it is up; a
// group the coming nodes cannot hold, or that a group before it already
// counts on, still waits for capacity.
func TestComingNodes(t *testing.T) {
	up := func(name string, gpus int) model.Node {
		return schedtest.Node(name, 64000, 1<<20).GPUs(gpus, "H100").Obj()
	}
	coming := func(name string, gpus int) model.Node {
		return schedtest.Node(name, 64000, 1<<20).GPUs(gpus, "H100").Coming().Obj()
	}
	type want struct {
		code, wait string
		coming     []string
	}
	tests := []struct {
		name    string
		nodes   []model.Node
		pending []model.PodGroup
		// fixed: no node autoscaler adds nodes.
		fixed bool
		// want is, per group, what it waits for; a group not named is
		// bound.
		want map[string]want
	}{
		{name: "a pod that fits the coming node waits for it",
			nodes:   []model.Node{up("busy", 0), coming("new", 8)},
			pending: []model.PodGroup{schedtest.Group("a").Pods(1, schedtest.GPU(8, 0)).Obj()},
			want:    map[string]want{"a": {model.UnplacedNodesComing, model.WaitComing, []string{"new"}}}},
		{name: "the second of two pods the one coming node holds one of waits for capacity",
			nodes: []model.Node{coming("new", 8)},
			pending: []model.PodGroup{
				schedtest.Group("a").Created(1).Pods(1, schedtest.GPU(8, 0)).Obj(),
				schedtest.Group("b").Created(2).Pods(1, schedtest.GPU(8, 0)).Obj(),
			},
			want: map[string]want{
				"a": {model.UnplacedNodesComing, model.WaitComing, []string{"new"}},
				"b": {model.UnplacedNoFit, model.WaitCapacity, nil},
			}},
		{name: "a gang partly on a node that is up waits whole for the coming one, bound nowhere",
			nodes:   []model.Node{up("ready", 8), coming("new-0", 8), coming("new-1", 8)},
			pending: []model.PodGroup{schedtest.Group("g").MinMember(3).Pods(3, schedtest.GPU(8, 0)).Obj()},
			want:    map[string]want{"g": {model.UnplacedNodesComing, model.WaitComing, []string{"new-0", "new-1"}}}},
		{name: "a gang larger than the nodes up and coming together waits for capacity",
			nodes:   []model.Node{up("ready", 8), coming("new", 8)},
			pending: []model.PodGroup{schedtest.Group("g").MinMember(3).Pods(3, schedtest.GPU(8, 0)).Obj()},
			fixed:   true,
			want:    map[string]want{"g": {model.UnplacedAboveCapacity, model.WaitCapacity, nil}}},
		{name: "a pod larger than the coming node waits for capacity",
			nodes:   []model.Node{coming("new", 4)},
			pending: []model.PodGroup{schedtest.Group("a").Pods(1, schedtest.GPU(8, 0)).Obj()},
			want:    map[string]want{"a": {model.UnplacedNoFit, model.WaitCapacity, nil}}},
		{name: "a pod the coming node's labels do not match waits for capacity",
			nodes:   []model.Node{coming("new", 8)},
			pending: []model.PodGroup{schedtest.Group("a").Pods(1, schedtest.Confined(schedtest.GPU(8, 0), "pool", "other")).Obj()},
			want:    map[string]want{"a": {model.UnplacedNoFit, model.WaitCapacity, nil}}},
		{name: "a pod that fits a node that is up is bound there, not kept for the coming one",
			nodes:   []model.Node{coming("new", 8), up("ready", 8)},
			pending: []model.PodGroup{schedtest.Group("a").Pods(1, schedtest.GPU(8, 0)).Obj()},
			want:    map[string]want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: tc.nodes, Pending: tc.pending, NodesMayBeAdded: !tc.fixed}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range d.Binds {
				if _, waits := tc.want[b.Group]; waits {
					t.Errorf("%s bound to %s; want it waiting", b.Pod, b.Node)
				}
				for _, n := range tc.nodes {
					if n.Name == b.Node && n.Coming {
						t.Errorf("%s bound to %s, which has yet to register its GPUs", b.Pod, b.Node)
					}
				}
			}
			got := map[string]model.Unplaced{}
			for _, u := range d.Unplaced {
				got[u.Group] = u
			}
			for g, w := range tc.want {
				u, ok := got[g]
				if !ok {
					t.Errorf("%s is not waiting; unplaced %+v", g, d.Unplaced)
					continue
				}
				if u.Code != w.code || u.Wait != w.wait || !slices.Equal(u.Coming, w.coming) {
					t.Errorf("%s: code %s wait %s coming %v (%s), want code %s wait %s coming %v", g, u.Code, u.Wait, u.Coming, u.Reason, w.code, w.wait, w.coming)
				}
			}
			if len(d.Binds) == 0 && len(tc.want) == 0 {
				t.Errorf("nothing bound; unplaced %+v", d.Unplaced)
			}
		})
	}
}

// A gang that must sit in one rack waits for a rack of coming nodes as it
// would be placed there, not for capacity: the what-if places it as the
// cycle does, its topology included.
func TestComingNodesKeepAGangsTopology(t *testing.T) {
	rackOf := func(n model.Node) string { return n.Domains[schedtest.RackKey] }
	// Two racks of two 8-GPU nodes: rack 0 up with one node busy, rack 1
	// bought and registering.
	cluster := func() []model.Node {
		nodes := schedtest.TopologyCluster(1, 1, 2, 2, 8)
		for i := range nodes {
			if rackOf(nodes[i]) == "z0-b0-r1" {
				nodes[i].Coming = true
			}
		}
		return nodes
	}
	busy := schedtest.Group("busy").Pods(1, schedtest.GPU(8, 0)).Obj()
	tests := []struct {
		name  string
		size  int
		code  string
		wait  string
		nodes []string
	}{
		{"two nodes in one rack: the coming rack", 2, model.UnplacedNodesComing, model.WaitComing, []string{"z0-b0-r1-n0", "z0-b0-r1-n1"}},
		{"three nodes in one rack: no rack, coming or not", 3, model.UnplacedNoDomain, model.WaitCapacity, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := cluster()
			g := schedtest.Group("g").Created(2).MinMember(tc.size).Topology(model.GangTopology{Levels: schedtest.TopologyLevels, Required: schedtest.RackKey}).
				Pods(tc.size, schedtest.GPU(8, 0)).Obj()
			b := busy
			b.CreatedAt = 1
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{b, g}, NodesMayBeAdded: true}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			for _, bd := range d.Binds {
				if bd.Group == "g" {
					t.Fatalf("%s bound to %s; want the gang waiting", bd.Pod, bd.Node)
				}
			}
			var u *model.Unplaced
			for i := range d.Unplaced {
				if d.Unplaced[i].Group == "g" {
					u = &d.Unplaced[i]
				}
			}
			if u == nil {
				t.Fatalf("g is not waiting; binds %+v", d.Binds)
			}
			if u.Code != tc.code || u.Wait != tc.wait || !slices.Equal(u.Coming, tc.nodes) {
				t.Errorf("g: code %s wait %s coming %v (%s); want code %s wait %s coming %v", u.Code, u.Wait, u.Coming, u.Reason, tc.code, tc.wait, tc.nodes)
			}
		})
	}
}

// A group waiting for a coming node is bound there once the node has
// registered its GPUs; while it is coming, a group's explanation counts
// the node as registering, not as full.
func TestComingNodeRegisters(t *testing.T) {
	nodes := []model.Node{schedtest.Node("new", 64000, 1<<20).GPUs(8, "H100").Coming().Obj()}
	g := schedtest.Group("a").Pods(1, schedtest.GPU(8, 0)).Obj()
	g.Explain = true
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{g}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 0 || len(d.Unplaced) != 1 || d.Unplaced[0].Code != model.UnplacedNodesComing {
		t.Fatalf("binds %+v unplaced %+v; want a waiting for the coming node", d.Binds, d.Unplaced)
	}
	// Too large for the node even once up: the explanation names the
	// filter that holds it now.
	big := schedtest.Group("big").Pods(1, schedtest.GPU(16, 0)).Obj()
	big.Explain = true
	h.Snap.Pending = append(h.Snap.Pending, big)
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	for _, u := range d.Unplaced {
		if u.Group == "big" && (u.Wait != model.WaitCapacity || !slices.Contains(u.Filtered, model.FilterCount{Filter: placement.FilterComing, Nodes: 1})) {
			t.Errorf("big: wait %s filtered %+v, want capacity and the node counted as registering", u.Wait, u.Filtered)
		}
	}
	h.Snap.Pending = h.Snap.Pending[:1]
	// The node registers its GPUs.
	h.Snap.Nodes[0].Coming = false
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 1 || d.Binds[0].Node != "new" || len(d.Unplaced) != 0 {
		t.Fatalf("binds %+v unplaced %+v; want a bound to new once it is up", d.Binds, d.Unplaced)
	}
}

// A gang above what the nodes and the node pools' limits give together
// waits for the limits, not for capacity: an autoscaler would buy nodes
// for part of it. Within the limits, it waits for capacity.
func TestGangAboveNodeLimits(t *testing.T) {
	pool := func(add int64) []model.NodePool {
		return []model.NodePool{{Name: "gpu", AddGPUMilli: add * model.MilliPerGPU}}
	}
	tests := []struct {
		name     string
		pools    []model.NodePool
		wantCode string
		wantWait string
	}{
		{name: "no limit: capacity", wantCode: model.UnplacedNoFit, wantWait: model.WaitCapacity},
		{name: "room for the gang within the limits: capacity", pools: pool(24), wantCode: model.UnplacedNoFit, wantWait: model.WaitCapacity},
		{name: "the limits give too little: the limits", pools: pool(16), wantCode: model.UnplacedAboveNodeLimits, wantWait: model.WaitNodeLimits},
		{name: "a pool that may add nothing counts the nodes there are", pools: pool(0), wantCode: model.UnplacedAboveNodeLimits, wantWait: model.WaitNodeLimits},
		{name: "a pool of no limit: capacity", pools: []model.NodePool{{Name: "gpu", Unlimited: true}}, wantCode: model.UnplacedNoFit, wantWait: model.WaitCapacity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// One node of 8 GPUs; a gang of 4 x 8 needs three more.
			nodes := schedtest.Cluster("n", 1, 8, 64000, 1<<20)
			u := waitsWhole(t, model.Snapshot{Nodes: nodes, NodesMayBeAdded: true, NodePools: tc.pools,
				Pending: []model.PodGroup{schedtest.Group("g").MinMember(4).Pods(4, schedtest.GPU(8, 0)).Obj()}})
			if u.Code != tc.wantCode || u.Wait != tc.wantWait {
				t.Errorf("code %s wait %s (%s), want %s %s", u.Code, u.Wait, u.Reason, tc.wantCode, tc.wantWait)
			}
		})
	}
}

// Limits are per pool: a gang counts only the pools whose future nodes,
// and the nodes, its pods' selectors admit. Confined to a pool too small
// for it, it waits for the limits and names the pool, however much
// another pool may add; unconfined, the big pool holds it and it waits for
// capacity.
func TestGangAboveNodeLimitsPerPool(t *testing.T) {
	pools := []model.NodePool{
		{Name: "small", Labels: map[string]string{"karpenter.sh/nodepool": "small", "tier": "gpu"}, AddGPUMilli: 16 * model.MilliPerGPU},
		{Name: "big", Labels: map[string]string{"karpenter.sh/nodepool": "big", "tier": "gpu"}, AddGPUMilli: 64 * model.MilliPerGPU},
		{Name: "free", Labels: map[string]string{"karpenter.sh/nodepool": "free"}, Unlimited: true},
	}
	tests := []struct {
		name       string
		selector   map[string]string
		small      int // nodes of 8 GPUs there are in pool small
		wantCode   string
		wantReason string
	}{
		{name: "confined to the small pool", selector: map[string]string{"karpenter.sh/nodepool": "small"},
			wantCode: model.UnplacedAboveNodeLimits, wantReason: "(small) allow (GPUs 16; nothing now)"},
		{name: "confined to the small pool, its nodes counted", selector: map[string]string{"karpenter.sh/nodepool": "small"}, small: 1,
			wantCode: model.UnplacedNoFit},
		{name: "confined to pools of a label", selector: map[string]string{"tier": "gpu"}, wantCode: model.UnplacedNoFit},
		{name: "confined to no pool", selector: map[string]string{"tier": "cpu"}, wantCode: model.UnplacedAboveNodeLimits,
			wantReason: "the future nodes of no GPU node pool admit its pods"},
		{name: "unconfined: the pool of no limit", wantCode: model.UnplacedNoFit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []model.Node
			for i := range tc.small {
				nodes = append(nodes, schedtest.Node(fmt.Sprintf("s%d", i), 64000, 1<<20).GPUs(8, "H100").Label("karpenter.sh/nodepool", "small").Obj())
			}
			// Nodes of another pool that the confined gang cannot use.
			nodes = append(nodes, schedtest.Cluster("b", 2, 8, 64000, 1<<20)...)
			req := schedtest.GPU(8, 0)
			req.NodeSelector = tc.selector
			// 3 x 8 GPUs together with room for 8 more: a gang of 3 x 8
			// placed whole needs 24, and fits no node set that exists.
			u := waitsWhole(t, model.Snapshot{Nodes: nodes, NodesMayBeAdded: true, NodePools: pools,
				Pending: []model.PodGroup{schedtest.Group("g").MinMember(3).Pods(3, req).Obj()}})
			if u.Code != tc.wantCode || !strings.Contains(u.Reason, tc.wantReason) {
				t.Errorf("code %s (%s), want %s with %q", u.Code, u.Reason, tc.wantCode, tc.wantReason)
			}
		})
	}
}

// waitsWhole runs one cycle on snap, whose one pending group is g, and
// returns why g waits: the cycle must bind none of it.
func waitsWhole(t *testing.T, snap model.Snapshot) model.Unplaced {
	t.Helper()
	d, _ := runCycle(t, snap)
	if len(d.Binds) != 0 || len(d.Unplaced) != 1 {
		t.Fatalf("binds %+v unplaced %+v; want g waiting whole", d.Binds, d.Unplaced)
	}
	return d.Unplaced[0]
}
