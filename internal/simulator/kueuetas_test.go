package simulator

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// tasNodes are nodes in blocks and racks, by name: block/rack.
func tasNodes(layout map[string]string) []model.Node {
	var nodes []model.Node
	for _, name := range slices.Sorted(maps.Keys(layout)) {
		n := gpuNode(name, "H100", 8)
		if br := layout[name]; br != "" {
			b, r, _ := strings.Cut(br, "/")
			n.Domains[BlockLabel], n.Domains[RackLabel] = b, r
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// assigned counts kueueAssign's pods per node name.
func assigned(nodes []model.Node, at []int) map[string]int {
	if at == nil {
		return nil
	}
	out := map[string]int{}
	for _, i := range at {
		out[nodes[i].Name]++
	}
	return out
}

func TestKueueAssign(t *testing.T) {
	nodes := tasNodes(map[string]string{
		"n0": "b1/r1", "n1": "b1/r1", "n2": "b1/r1", "n3": "b1/r1",
		"n4": "b1/r2", "n5": "b1/r2",
		"n6": "b2/r3",
		"n7": "", // no labels: in no domain
	})
	counts := []int{3, 3, 2, 1, 4, 4, 8, 8}
	levels := []string{BlockLabel, RackLabel, hostnameLabel}
	tests := []struct {
		name string
		topo model.GangTopology
		n    int
		want map[string]int
	}{
		// Racks r2 and r3 hold 8 each, r1 9: BestFit takes the tightest,
		// r2 before r3 by name.
		{"preferred rack: the tightest rack that fits", model.GangTopology{Levels: levels, Preferred: RackLabel}, 7, map[string]int{"n4": 4, "n5": 3}},
		// No rack holds 12: one level up, block b1 (17) does, and in it
		// the fewest racks and nodes, largest first, the last one the
		// smallest that holds what remains.
		{"preferred rack falls back to the block", model.GangTopology{Levels: levels, Preferred: RackLabel}, 12, map[string]int{"n4": 4, "n5": 4, "n0": 3, "n3": 1}},
		{"required rack: none holds 10", model.GangTopology{Levels: levels, Required: RackLabel}, 10, nil},
		// Only block b1 holds 9, and in it rack r1 exactly.
		{"required block", model.GangTopology{Levels: levels, Required: BlockLabel}, 9, map[string]int{"n0": 3, "n1": 3, "n2": 2, "n3": 1}},
		{"preferred rack across blocks", model.GangTopology{Levels: levels, Preferred: RackLabel}, 20, map[string]int{"n6": 8, "n4": 4, "n5": 4, "n0": 3, "n3": 1}},
		{"more than every labelled node holds", model.GangTopology{Levels: levels, Preferred: RackLabel}, 26, nil},
		// The nodes are the last level all the same; in rack r2 both nodes
		// hold 4, and the last of equals is the tightest.
		{"levels without the node level", model.GangTopology{Levels: []string{BlockLabel, RackLabel}, Preferred: RackLabel}, 2, map[string]int{"n5": 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := assigned(nodes, kueueAssign(&tc.topo, nodes, counts, tc.n))
			if !maps.Equal(got, tc.want) {
				t.Fatalf("assignment = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("the KEP's example", func(t *testing.T) {
		// A rack whose four nodes hold 3, 3, 2 and 1 pods, and seven pods:
		// BestFit takes both 3s and then the node that holds exactly 1.
		one := tasNodes(map[string]string{"a": "b/r", "b": "b/r", "c": "b/r", "d": "b/r"})
		got := assigned(one, kueueAssign(&model.GangTopology{Levels: levels, Required: RackLabel}, one, []int{3, 3, 2, 1}, 7))
		if want := map[string]int{"a": 3, "b": 3, "d": 1}; !maps.Equal(got, want) {
			t.Fatalf("assignment = %v, want %v", got, want)
		}
	})
}

func TestPodsFit(t *testing.T) {
	n := gpuNode("n", "H100", 8)
	snap := &model.Snapshot{Nodes: []model.Node{n}, RunningByNode: [][]model.Allocation{{
		{Pod: "half", Node: "n", Request: model.Request{MilliCPU: 16000, GPUMilli: 500}, GPUs: []model.GPUShare{{Index: 0, Milli: 500}}},
		{Pod: "two", Node: "n", Request: model.Request{MilliCPU: 8000, GPUs: 2}, GPUs: []model.GPUShare{{Index: 1, Milli: 1000}, {Index: 2, Milli: 1000}}},
	}}}
	free := freeOf(snap)
	tests := []struct {
		name string
		req  model.Request
		want int
	}{
		// GPUs 3..7 are whole and free; GPU 0 is half taken.
		{"whole GPUs", model.Request{GPUs: 2}, 2},
		{"cpu bound", model.Request{MilliCPU: 20000, GPUs: 1}, 2},
		{"shares", model.Request{GPUMilli: 500}, 11},
		{"another model", model.Request{GPUs: 1, GPUModels: []string{"A100"}}, 0},
		{"a selector the node fails", model.Request{GPUs: 1, NodeSelector: map[string]string{"x": "y"}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := podsFit(&n, &free[0], &tc.req); got != tc.want {
				t.Fatalf("podsFit = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("take", func(t *testing.T) {
		f := freeOf(snap)[0]
		req := model.Request{MilliCPU: 1000, GPUs: 2}
		f.take(&n, &req, 2)
		if got := podsFit(&n, &f, &model.Request{GPUs: 1}); got != 1 {
			t.Fatalf("after two 2-GPU pods, %d whole GPUs are free, want 1", got)
		}
		if f.cpu != 64000-24000-2000 {
			t.Fatalf("cpu left = %d", f.cpu)
		}
	})
}

func TestTopologyStats(t *testing.T) {
	nodes := tasNodes(map[string]string{"a0": "b1/r1", "a1": "b1/r1", "b0": "b1/r2", "b1": "b1/r2", "c0": ""})
	idx := func(name string) int {
		return slices.IndexFunc(nodes, func(n model.Node) bool { return n.Name == name })
	}
	pref := TrainingTopology(false)
	req := TrainingTopology(true)
	whole := model.Request{GPUs: 8, MilliCPU: 1000}
	gang := func(topo *model.GangTopology, size int, created, started int64, on ...string) *gangRecord {
		r := &gangRecord{topo: topo, shape: whole, size: size, created: created, started: started, nodeOf: map[string]int{}}
		for k, n := range on {
			r.nodeOf[string(rune('p'+k))] = idx(n)
		}
		return r
	}
	gangs := map[string]*gangRecord{
		"in-rack":    gang(pref, 2, 0, 10, "a0", "a1"),
		"split":      gang(pref, 2, 0, 30, "a0", "b0"),
		"too-big":    gang(pref, 3, 0, 0, "a0", "a1", "b0"), // no rack holds 3 nodes
		"unlabelled": gang(pref, 2, 0, 50, "a0", "c0"),      // c0 is in no rack
		"required":   gang(req, 2, 100, 100, "b0", "b1"),    //
		"waiting":    gang(pref, 2, 0, -1),                  // never started
	}
	// Only "in-rack" and "split" had a rack with room when placed.
	gangs["in-rack"].fitAtStart = map[string]bool{RackLabel: true}
	gangs["split"].fitAtStart = map[string]bool{RackLabel: true}
	gangs["unlabelled"].fitAtStart = map[string]bool{RackLabel: false}
	st := topologyStats(TopologyBlind, nodes, gangs)
	if st.Gangs != 6 || st.Started != 5 || st.Policy != "blind" {
		t.Fatalf("gangs %d started %d policy %s", st.Gangs, st.Started, st.Policy)
	}
	p := st.Preferred
	if p.Level != RackLabel || p.Gangs != 4 || p.InOne != 1 || p.CanFit != 3 || p.CanFitInOne != 1 || p.MaxDomains != 2 {
		t.Fatalf("preferred = %+v", p)
	}
	if p.FitAtStart != 2 || p.FitAtStartInOne != 1 || p.FitAtStartShare != 0.5 {
		t.Fatalf("fit at start = %d, in one %d, share %g; want 2, 1, 0.5", p.FitAtStart, p.FitAtStartInOne, p.FitAtStartShare)
	}
	if want := (1.0 + 2 + 2 + 2) / 4; p.MeanDomains != want {
		t.Fatalf("mean domains = %g, want %g", p.MeanDomains, want)
	}
	if r := st.Required; r.Gangs != 1 || r.InOne != 1 || r.InOneShare != 1 {
		t.Fatalf("required = %+v", r)
	}
	// Waits 10, 30, 0, 50, 0.
	if st.WaitMean != 18 || st.WaitP50 != 10 || st.WaitP90 != 50 {
		t.Fatalf("waits mean %g p50 %g p90 %g", st.WaitMean, st.WaitP50, st.WaitP90)
	}
}

func TestFitsOneDomain(t *testing.T) {
	nodes := tasNodes(map[string]string{"a0": "b1/r1", "a1": "b1/r1", "b0": "b1/r2", "b1": "b1/r2"})
	snap := &model.Snapshot{Nodes: nodes, RunningByNode: [][]model.Allocation{
		{{Pod: "x", Node: "a0", Request: model.Request{GPUs: 1}, GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}}, nil,
		{{Pod: "y", Node: "b0", Request: model.Request{GPUs: 1}, GPUs: []model.GPUShare{{Index: 3, Milli: 1000}}}}, nil,
	}}
	free := freeOf(snap)
	levels := []string{BlockLabel, RackLabel, hostnameLabel}
	whole := model.Request{GPUs: 8}
	// One GPU taken in each rack: no rack holds two whole nodes, the
	// block holds two.
	if fitsOneDomain(nodes, free, levels, 1, &whole, 2) {
		t.Fatal("a rack with a GPU taken on one of its two nodes holds two whole-node pods")
	}
	if !fitsOneDomain(nodes, free, levels, 0, &whole, 2) || !fitsOneDomain(nodes, free, levels, 1, &whole, 1) {
		t.Fatal("the block holds two whole-node pods and a rack one")
	}
	seven := model.Request{GPUs: 7}
	if !fitsOneDomain(nodes, free, levels, 1, &seven, 2) {
		t.Fatal("a rack holds two 7-GPU pods")
	}
}

// rackTrace is two racks of four 8-GPU nodes, two lone 8-GPU pods that
// take two nodes of the first rack for an hour, then a gang of four that
// prefers a rack (the second one is free) and one that requires a rack
// (it waits for the first to empty): packing alone fills the first rack's
// free nodes and splits both.
const rackTrace = `
nodes:
- {name: r1n, count: 4, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r1}}
- {name: r2n, count: 4, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r2}}
pods:
- {name: lone, count: 2, gpus: 8, milliCPU: 1000, duration: 3600}
- name: pref
  count: 4
  minMember: 4
  gpus: 8
  milliCPU: 1000
  createdAt: 60
  duration: 600
  topology: {levels: [gpuplane.io/block, gpuplane.io/rack, kubernetes.io/hostname], preferred: gpuplane.io/rack}
- name: req
  count: 4
  minMember: 4
  gpus: 8
  milliCPU: 1000
  createdAt: 120
  duration: 600
  topology: {levels: [gpuplane.io/block, gpuplane.io/rack, kubernetes.io/hostname], required: gpuplane.io/rack}
`

func TestRunEventTopologyPolicies(t *testing.T) {
	tr, err := ReadYAMLTrace("racks.yaml", strings.NewReader(rackTrace))
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []TopologyPolicy{TopologyAware, TopologyBlind, TopologyKueueTAS} {
		t.Run(string(pol), func(t *testing.T) {
			sawTopology, sawPinned := false, false
			res, err := RunEvent(context.Background(), tr, EventConfig{Policy: "fgd-packing", Seed: 1, Topology: pol,
				OnCycle: func(_ int64, snap *model.Snapshot, d *model.Decisions) {
					for _, g := range snap.Pending {
						sawTopology = sawTopology || g.Topology != nil
						for _, p := range g.Pods {
							if h := p.Request.NodeSelector[hostnameLabel]; h != "" {
								sawPinned = true
								if pol == TopologyKueueTAS && !slices.ContainsFunc(d.Binds, func(b model.Bind) bool { return b.Pod == p.Name && b.Node == h }) &&
									slices.ContainsFunc(d.Binds, func(b model.Bind) bool { return b.Pod == p.Name }) {
									t.Errorf("pod %s pinned to %s was bound elsewhere", p.Name, h)
								}
							}
						}
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if res.TopologyPolicy != string(pol) || res.Topology == nil || res.Topology.Gangs != 2 {
				t.Fatalf("result topology %q %+v", res.TopologyPolicy, res.Topology)
			}
			if sawTopology != (pol == TopologyAware) {
				t.Fatalf("the core saw a gang's topology: %v; want it only when aware", sawTopology)
			}
			if sawPinned != (pol == TopologyKueueTAS) {
				t.Fatalf("pods pinned to nodes: %v; want it only for the kueue-tas baseline", sawPinned)
			}
			st := res.Topology
			if st.Started != 2 || res.FailedPods != 0 {
				t.Fatalf("started %d gangs, %d pods never ran", st.Started, res.FailedPods)
			}
			if st.Preferred.FitAtStart != 1 || st.Required.FitAtStart != 1 {
				t.Fatalf("a rack had room for each gang when it was placed; counted %+v %+v", st.Preferred, st.Required)
			}
			wantInOne := 1
			if pol == TopologyBlind {
				wantInOne = 0
			}
			if st.Required.InOne != wantInOne || st.Preferred.InOne != wantInOne || st.Preferred.FitAtStartInOne != wantInOne {
				t.Fatalf("gangs in one rack: required %+v preferred %+v; want %d each", st.Required, st.Preferred, wantInOne)
			}
		})
	}
}

// With a slice level the baseline counts whole slices as Kueue's two-level
// TAS does, and places each slice of consecutive pods inside one domain of
// that level.
func TestKueueAssignSlices(t *testing.T) {
	nodes := tasNodes(map[string]string{
		"n0": "b1/r1", "n1": "b1/r1", "n2": "b1/r1", "n3": "b1/r1",
		"n4": "b1/r2", "n5": "b1/r2",
		"n6": "b2/r3",
	})
	counts := []int{3, 3, 2, 1, 4, 4, 8}
	levels := []string{BlockLabel, RackLabel, hostnameLabel}
	tests := []struct {
		name       string
		topo       model.GangTopology
		n          int
		want       map[string]int
		sliceLevel string
	}{
		// Racks r1 (9 free) and r2 (8) hold one slice of 5 each, r3 one:
		// block b1 holds two. Blind to slices, the ten pods would take
		// n4, n5 and n2, and the second slice would straddle r2 and r1.
		{"a slice per rack in one block", model.GangTopology{Levels: levels, Required: BlockLabel, SliceRequired: RackLabel, SliceSize: 5}, 10,
			map[string]int{"n0": 3, "n2": 2, "n4": 4, "n5": 1}, RackLabel},
		// Pairs on one node: r1's nodes hold one pair each (n3 none), the
		// tightest rack that holds two pairs, where packing pods alone
		// would take r2's n5.
		{"pairs on a node, in one rack", model.GangTopology{Levels: levels, Required: RackLabel, SliceRequired: hostnameLabel, SliceSize: 2}, 4,
			map[string]int{"n0": 2, "n2": 2}, hostnameLabel},
		// A gang partly placed already: three pods left, the last slice
		// short.
		{"the last slice short", model.GangTopology{Levels: levels, Required: RackLabel, SliceRequired: hostnameLabel, SliceSize: 2}, 3,
			map[string]int{"n0": 2, "n2": 1}, hostnameLabel},
		{"no rack holds two slices of 5", model.GangTopology{Levels: levels, Required: RackLabel, SliceRequired: hostnameLabel, SliceSize: 5}, 10, nil, ""},
		// Preferred block: b1 holds four slices of 4 (r1 two, r2 two),
		// b2 two.
		{"preferred block, slices by rack", model.GangTopology{Levels: levels, Preferred: BlockLabel, SliceRequired: RackLabel, SliceSize: 4}, 16,
			map[string]int{"n0": 3, "n1": 3, "n2": 2, "n4": 4, "n5": 4}, RackLabel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at := kueueAssign(&tc.topo, nodes, counts, tc.n)
			if got := assigned(nodes, at); !maps.Equal(got, tc.want) {
				t.Fatalf("assignment = %v, want %v", got, tc.want)
			}
			for s := 0; tc.sliceLevel != "" && s < len(at); s += tc.topo.SliceSize {
				doms := map[string]bool{}
				for _, i := range at[s:min(s+tc.topo.SliceSize, len(at))] {
					d := domainOf(&nodes[i], tc.sliceLevel)
					if tc.sliceLevel == hostnameLabel {
						d = nodes[i].Name
					}
					doms[d] = true
				}
				if len(doms) != 1 {
					t.Fatalf("slice at pod %d spans %v", s, doms)
				}
			}
		})
	}
}

func TestKueueTopology(t *testing.T) {
	levels := []string{BlockLabel, RackLabel, hostnameLabel}
	bySize := &model.GangTopology{Levels: levels, Required: BlockLabel, SliceRequired: RackLabel, SliceSize: 2}
	bySub := &model.GangTopology{Levels: levels, Required: BlockLabel, SliceRequired: RackLabel}
	tests := []struct {
		name   string
		topo   *model.GangTopology
		slices []string
		size   int
		err    string
	}{
		{"no slices", &model.GangTopology{Levels: levels, Required: RackLabel}, []string{"", ""}, 0, ""},
		{"by size", bySize, []string{"", "", "", ""}, 2, ""},
		{"by size, not whole", bySize, []string{"", "", ""}, 0, "3 pods are not a whole number of slices of 2"},
		{"sub-groups of one size", bySub, []string{"s0", "s1", "s0", "s1"}, 2, ""},
		{"sub-groups of two sizes", bySub, []string{"s0", "s0", "s1"}, 0, "slices of one size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kueueTopology(tc.topo, tc.slices)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got.SliceSize != tc.size {
				t.Fatalf("got %+v, %v; want slice size %d", got, err, tc.size)
			}
			if tc.topo == bySub && tc.topo.SliceSize != 0 {
				t.Fatal("the trace's topology was changed")
			}
		})
	}
}

// Pods of one sub-group are placed together wherever the trace lists
// them.
func TestSliceOrder(t *testing.T) {
	g := &model.PodGroup{Pods: []model.Pod{{Name: "a", Slice: "x"}, {Name: "b", Slice: "y"}, {Name: "c", Slice: "x"}, {Name: "d", Slice: "y"}}}
	if got := sliceOrder(g); !slices.Equal(got, []int{0, 2, 1, 3}) {
		t.Fatalf("order %v, want [0 2 1 3]", got)
	}
}

// The kueue-tas baseline runs a trace whose gangs slice by sub-group, and
// binds each sub-group inside one rack while the gang keeps its block:
// rack r1 holds six of the pods and r2 four, so that filling r1 first
// would put the second sub-group across both.
func TestRunEventKueueTASSlices(t *testing.T) {
	const trace = `
nodes:
- {name: r1n, count: 3, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r1}}
- {name: r2n, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r2}}
- {name: r3n, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b2, gpuplane.io/rack: r3}}
pods:
- name: sliced
  count: 8
  minMember: 8
  gpus: 4
  milliCPU: 1000
  duration: 600
  slicePods: 4
  topology: {levels: [gpuplane.io/block, gpuplane.io/rack, kubernetes.io/hostname], required: gpuplane.io/block, sliceRequired: gpuplane.io/rack}
`
	tr, err := ReadYAMLTrace("sliced.yaml", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	rackOf, blockOf := map[string]string{}, map[string]string{}
	for i := range tr.Nodes {
		rackOf[tr.Nodes[i].Name], blockOf[tr.Nodes[i].Name] = domainOf(&tr.Nodes[i], RackLabel), domainOf(&tr.Nodes[i], BlockLabel)
	}
	sliceOf := map[string]string{}
	for _, p := range tr.Pods {
		sliceOf[p.Name] = p.Slice
	}
	racks, blocks := map[string]map[string]bool{}, map[string]bool{}
	res, err := RunEvent(context.Background(), tr, EventConfig{Policy: "fgd-packing", Seed: 1, Topology: TopologyKueueTAS,
		OnCycle: func(_ int64, _ *model.Snapshot, d *model.Decisions) {
			for _, b := range d.Binds {
				s := sliceOf[b.Pod]
				if racks[s] == nil {
					racks[s] = map[string]bool{}
				}
				racks[s][rackOf[b.Node]] = true
				blocks[blockOf[b.Node]] = true
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.FailedPods != 0 || len(racks) != 2 {
		t.Fatalf("%d pods never ran; slices bound %v", res.FailedPods, racks)
	}
	for s, r := range racks {
		if len(r) != 1 {
			t.Errorf("slice %s bound in racks %v, want one", s, r)
		}
	}
	if len(blocks) != 1 || !blocks["b1"] {
		t.Errorf("the gang bound in blocks %v, want b1 alone", blocks)
	}
}
