package scheduler_test

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// claimNode is a node of claim-only GPUs; sets[g] names the device sets
// GPU g belongs to ("" for none).
func claimNode(name string, sets ...string) model.Node {
	n := schedtest.Node(name, 64000, 1<<20).GPUs(len(sets), "H100").Obj()
	for g := range n.GPUs {
		n.GPUs[g].ClaimOnly, n.GPUs[g].DeviceSets = true, sets[g]
	}
	return n
}

// allOf asks for every GPU of a device set on the node, most most anywhere.
func allOf(set string, most int) model.Request {
	return model.Request{MilliCPU: 1000, DeviceSet: set, AllOfSet: true, GPUs: most}
}

// firstOf asks for the first of alternatives that places.
func firstOf(alts ...model.Request) model.Request {
	r := model.Request{MilliCPU: 1000, FirstOf: alts}
	for k := range r.FirstOf {
		r.FirstOf[k].MilliCPU = r.MilliCPU
	}
	return r
}

// harnessCycle runs one cycle of a harness made of snap and a scheduler
// of cfg, and returns the harness with the cycle's decisions.
func harnessCycle(t *testing.T, snap model.Snapshot, cfg scheduler.Config) (*schedtest.Harness, model.Decisions) {
	t.Helper()
	h, err := schedtest.NewHarness(snap, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	return h, d
}

// wantUnplaced fails t unless d binds nothing and leaves one group
// unplaced with code.
func wantUnplaced(t *testing.T, d *model.Decisions, code string) {
	t.Helper()
	if len(d.Binds) != 0 || len(d.Unplaced) != 1 || d.Unplaced[0].Code != code {
		t.Fatalf("binds %+v, unplaced %+v; want unplaced with %s", d.Binds, d.Unplaced, code)
	}
}

// indexes lists the GPUs a bind gives.
func indexes(b model.Bind) []int {
	var out []int
	for _, sh := range b.GPUs {
		out = append(out, sh.Index)
	}
	return out
}

// sameAsFresh fails t unless h's scheduler holds the free state a new
// scheduler makes of h's snapshot: what it assigned, released and rolled
// back for pods with claims of both kinds adds up to what they hold.
func sameAsFresh(t *testing.T, h *schedtest.Harness) {
	t.Helper()
	fresh, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	snap := h.Snap
	snap.Pending = nil
	if _, err := fresh.Cycle(&snap); err != nil {
		t.Fatal(err)
	}
	a, b := scheduler.StateOf(h.Sched), scheduler.StateOf(fresh)
	for i := range a.Nodes {
		x, y := &a.Nodes[i], &b.Nodes[i]
		if x.FreeCPU != y.FreeCPU || !slices.Equal(x.GPUFree, y.GPUFree) || x.Pods != y.Pods || !reflect.DeepEqual(x.ShareSizes, y.ShareSizes) {
			t.Fatalf("node %s: the scheduler's state %+v, a new one's %+v", x.Node.Name, *x, *y)
		}
	}
}

// A request for all of its set's GPUs takes, on the node it gets, exactly
// that node's set GPUs, only when every one of them is free; queues count
// the largest set before placement and the GPUs it got after.
func TestAllOfSet(t *testing.T) {
	// a has 3 GPUs of set s (1..3), b has 2 (0 and 1) and one other.
	a := claimNode("a", "", "s", "s", "s")
	b := claimNode("b", "s", "s", "")
	busy := func(node string, g int) model.Allocation {
		return model.Allocation{Pod: "busy-" + node + strconv.Itoa(g), Group: "busy", Node: node, Request: model.Request{GPUs: 1, DeviceSet: "s"},
			GPUs: []model.GPUShare{{Index: g, Milli: 1000}}, NonPreemptible: true}
	}
	tests := []struct {
		name    string
		nodes   []model.Node
		running []model.Allocation
		queues  []model.Queue
		// wantNode and wantGPUs are the bind's; "" for none, wantCode
		// then says why.
		wantNode string
		wantGPUs []int
		wantCode string
	}{
		{name: "one node: its whole set", nodes: []model.Node{a}, wantNode: "a", wantGPUs: []int{1, 2, 3}},
		{name: "a set GPU taken rules the node out", nodes: []model.Node{a, b}, running: []model.Allocation{busy("a", 2)},
			wantNode: "b", wantGPUs: []int{0, 1}},
		{name: "a GPU outside the set taken does not", nodes: []model.Node{a, b}, running: []model.Allocation{busy("a", 0), busy("b", 0)},
			wantNode: "a", wantGPUs: []int{1, 2, 3}},
		{name: "every node has a set GPU taken", nodes: []model.Node{a, b}, running: []model.Allocation{busy("a", 3), busy("b", 1)},
			wantCode: model.UnplacedNoFit},
		{name: "a node without the set takes nothing", nodes: []model.Node{claimNode("c", "", "")}, wantCode: model.UnplacedNoFit},
		{name: "queues count the largest set before placement", nodes: []model.Node{a, b},
			queues: []model.Queue{{Name: "q", Limit: model.Resources{GPUMilli: 2000}}}, wantCode: model.UnplacedAboveQueueLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := slices.Clone(tc.nodes)
			queues := tc.queues
			if queues == nil {
				queues = []model.Queue{{Name: "q"}}
			}
			h, d := harnessCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, tc.running...), Queues: queues,
				Pending: []model.PodGroup{schedtest.Group("g").Queue("q").Pods(1, allOf("s", 3)).Obj()}}, scheduler.Config{})
			if tc.wantNode == "" {
				wantUnplaced(t, &d, tc.wantCode)
				return
			}
			if len(d.Binds) != 1 || d.Binds[0].Node != tc.wantNode || !slices.Equal(indexes(d.Binds[0]), tc.wantGPUs) {
				t.Fatalf("binds %+v, want GPUs %v of %s", d.Binds, tc.wantGPUs, tc.wantNode)
			}
			// Once placed, the pod counts the GPUs it got.
			var got *model.Allocation
			for x := range h.Snap.AllRunning() {
				if x.Pod == "g-0" {
					got = x
				}
			}
			if got == nil || got.Request.AllOfSet || got.Request.GPUs != len(tc.wantGPUs) || got.Usage().GPUMilli != int64(len(tc.wantGPUs))*model.MilliPerGPU {
				t.Fatalf("running allocation %+v, want %d GPUs counted", got, len(tc.wantGPUs))
			}
			i := slices.IndexFunc(d.Queues, func(qs model.QueueStatus) bool { return qs.Name == "q" })
			if i < 0 || d.Queues[i].Usage.GPUMilli != int64(len(tc.wantGPUs))*model.MilliPerGPU {
				t.Errorf("queues %+v after the cycle, want q using the %d GPUs placed", d.Queues, len(tc.wantGPUs))
			}
			sameAsFresh(t, h)
		})
	}
}

// A request with alternatives takes the first that places on some node,
// and says which; queues count the largest.
func TestFirstOf(t *testing.T) {
	two := model.Request{DeviceSet: "big", GPUs: 2}
	one := model.Request{DeviceSet: "small", GPUs: 1}
	all := model.Request{DeviceSet: "small", GPUs: 2, AllOfSet: true}
	busy := func(node string, g int) model.Allocation {
		return model.Allocation{Pod: "busy-" + node + strconv.Itoa(g), Group: "busy", Node: node, Request: model.Request{GPUs: 1, DeviceSet: "big"},
			GPUs: []model.GPUShare{{Index: g, Milli: 1000}}, NonPreemptible: true}
	}
	tests := []struct {
		name     string
		nodes    []model.Node
		running  []model.Allocation
		alts     []model.Request
		queues   []model.Queue
		wantAlt  int
		wantNode string
		wantGPUs []int
		wantCode string
	}{
		{name: "the first where it fits", nodes: []model.Node{claimNode("a", "big,small", "big,small")}, alts: []model.Request{two, one},
			wantAlt: 0, wantNode: "a", wantGPUs: []int{0, 1}},
		{name: "the second where the first fits nowhere", nodes: []model.Node{claimNode("a", "big,small", "big,small")},
			running: []model.Allocation{busy("a", 0)}, alts: []model.Request{two, one}, wantAlt: 1, wantNode: "a", wantGPUs: []int{1}},
		{name: "the first on another node before the second here", nodes: []model.Node{claimNode("a", "small", "small"), claimNode("b", "big", "big")},
			alts: []model.Request{two, one}, wantAlt: 0, wantNode: "b", wantGPUs: []int{0, 1}},
		{name: "an alternative of all of a set", nodes: []model.Node{claimNode("a", "big", "small", "small")}, alts: []model.Request{two, all},
			wantAlt: 1, wantNode: "a", wantGPUs: []int{1, 2}},
		{name: "none fits", nodes: []model.Node{claimNode("a", "big", "")}, alts: []model.Request{two, one}, wantCode: model.UnplacedNoFit},
		{name: "queues count the largest", nodes: []model.Node{claimNode("a", "big,small", "big,small")}, alts: []model.Request{one, two},
			queues: []model.Queue{{Name: "q", Limit: model.Resources{GPUMilli: 1000}}}, wantCode: model.UnplacedAboveQueueLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := slices.Clone(tc.nodes)
			h, d := harnessCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, tc.running...), Queues: tc.queues,
				Pending: []model.PodGroup{schedtest.Group("g").Queue("q").Pods(1, firstOf(slices.Clone(tc.alts)...)).Obj()}}, scheduler.Config{})
			if tc.wantNode == "" {
				wantUnplaced(t, &d, tc.wantCode)
				return
			}
			if len(d.Binds) != 1 || d.Binds[0].Node != tc.wantNode || d.Binds[0].Alternative != tc.wantAlt || !slices.Equal(indexes(d.Binds[0]), tc.wantGPUs) {
				t.Fatalf("binds %+v, want alternative %d with GPUs %v of %s", d.Binds, tc.wantAlt, tc.wantGPUs, tc.wantNode)
			}
			sameAsFresh(t, h)
			for x := range h.Snap.AllRunning() {
				if x.Pod == "g-0" && (len(x.Request.FirstOf) != 0 || x.Request.DeviceSet != tc.alts[tc.wantAlt].DeviceSet || x.Request.GPUs != len(tc.wantGPUs)) {
					t.Fatalf("running allocation %+v, want alternative %d's request with %d GPUs", x, tc.wantAlt, len(tc.wantGPUs))
				}
			}
		})
	}
}

// Preemption for claims of both kinds: the what-if places the request as
// the cycle does, the victims' room is held, and the next cycle binds the
// plan with the alternative it chose; a what-if that fails leaves the
// state as it was.
func TestClaimModesPreempt(t *testing.T) {
	q := []model.Queue{{Name: "q"}}
	low := func(name string, gpu int) model.Allocation {
		return model.Allocation{Pod: name, Group: name, Queue: "q", Priority: 1, Node: "a", Request: model.Request{MilliCPU: 1000, GPUs: 1, DeviceSet: "s"},
			GPUs: []model.GPUShare{{Index: gpu, Milli: 1000}}}
	}
	fixed := func(a model.Allocation) model.Allocation { a.NonPreemptible = true; return a }
	tests := []struct {
		name        string
		running     []model.Allocation
		req         model.Request
		wantEvicted []string
		wantAlt     int
		wantGPUs    []int
	}{
		{name: "all of a set evicts every pod on it", running: []model.Allocation{low("l0", 0), low("l2", 2)}, req: allOf("s", 3),
			wantEvicted: []string{"l0", "l2"}, wantGPUs: []int{0, 1, 2}},
		{name: "an alternative that fits needs no eviction", running: []model.Allocation{low("l0", 0), low("l1", 1)},
			req: firstOf(model.Request{DeviceSet: "s", GPUs: 3}, model.Request{DeviceSet: "s", GPUs: 1}), wantAlt: 1, wantGPUs: []int{2}},
		{name: "victims a later alternative spares are spared", running: []model.Allocation{low("l0", 0), low("l1", 1), low("l2", 2)},
			// With every victim gone the first alternative places; the
			// reprieve puts victims back while the pod still places, as
			// kube-scheduler's does, and the second alternative needs
			// only one of them gone.
			req:         firstOf(model.Request{DeviceSet: "s", GPUs: 3}, model.Request{DeviceSet: "s", GPUs: 1}),
			wantEvicted: []string{"l0"}, wantAlt: 1, wantGPUs: []int{0}},
		{name: "a victim that cannot go leaves all of the set unplaced", running: []model.Allocation{low("l0", 0), fixed(low("l2", 2))},
			req: allOf("s", 3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []model.Node{claimNode("a", "s", "s", "s")}
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, tc.running...), Queues: q,
				Budget:  model.DisruptionBudget{MaxEvictions: -1},
				Pending: []model.PodGroup{schedtest.Group("g").Queue("q").Priority(5).Pods(1, tc.req).Obj()}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			before := schedtest.Running(&h.Snap)
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			var evicted []string
			for _, e := range d.Evictions {
				evicted = append(evicted, e.Pod)
			}
			slices.Sort(evicted)
			if !slices.Equal(evicted, tc.wantEvicted) {
				t.Fatalf("evicted %v, want %v", evicted, tc.wantEvicted)
			}
			if tc.wantGPUs == nil {
				if len(schedtest.Planned(&d)) != 0 || !slices.EqualFunc(schedtest.Running(&h.Snap), before, func(x, y model.Allocation) bool { return x.Pod == y.Pod }) {
					t.Fatalf("placed %+v, running %+v; want nothing changed", schedtest.Planned(&d), schedtest.Running(&h.Snap))
				}
				// The failed what-if rolled back all it tried.
				sameAsFresh(t, h)
				return
			}
			if len(d.Evictions) > 0 {
				// The victims are gone: the next cycle binds the plan.
				if d, err = h.Cycle(); err != nil {
					t.Fatal(err)
				}
			}
			if len(d.Binds) != 1 || d.Binds[0].Alternative != tc.wantAlt || !slices.Equal(indexes(d.Binds[0]), tc.wantGPUs) {
				t.Fatalf("binds %+v, want alternative %d with GPUs %v", d.Binds, tc.wantAlt, tc.wantGPUs)
			}
			sameAsFresh(t, h)
		})
	}
}

// A bind naming an alternative its pod's request lacks is refused by the
// one applier of decisions, which changes nothing.
func TestApplyRefusesUnknownAlternative(t *testing.T) {
	nodes := []model.Node{claimNode("a", "s")}
	for _, tc := range []struct {
		name string
		req  model.Request
		alt  int
	}{
		{name: "alternative of a request without", req: model.Request{GPUs: 1, DeviceSet: "s"}, alt: 1},
		{name: "past the last", req: firstOf(model.Request{GPUs: 1, DeviceSet: "s"}), alt: 1},
		{name: "negative", req: firstOf(model.Request{GPUs: 1, DeviceSet: "s"}), alt: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{schedtest.Group("g").Pods(1, tc.req).Obj()}}
			d := model.Decisions{Binds: []model.Bind{{Pod: "g-0", Group: "g", Node: "a", GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}, Alternative: tc.alt}}}
			if err := model.Apply(&snap, &d, 1); err == nil || len(snap.Pending) != 1 {
				t.Fatalf("applied (err %v, pending %+v), want an error and nothing changed", err, snap.Pending)
			}
		})
	}
}

// An alternative with alternatives of its own is refused: the core reads
// one level of them.
func TestNestedAlternativesRefused(t *testing.T) {
	nested := firstOf(firstOf(model.Request{GPUs: 1, DeviceSet: "s"}))
	nodes := []model.Node{claimNode("a", "s")}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{schedtest.Group("g").Pods(1, nested).Obj()}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Cycle(); err == nil || !strings.Contains(err.Error(), "firstOf[0] has alternatives of its own") {
		t.Fatalf("cycle: %v, want the nested alternatives refused", err)
	}
}
