package scheduler_test

import (
	"fmt"
	"testing"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

var h100Profiles = []model.MIGProfile{{Name: "1g.10gb", Slices: 1, Instances: 7}, {Name: "3g.40gb", Slices: 3, Instances: 2}, {Name: "7g.80gb", Slices: 7, Instances: 1}}

// migNode is an opted-in node with whole GPUs and then MIG GPUs of 7
// slices (any layout).
func migNode(name string, whole, migGPUs int) model.Node {
	n := schedtest.Node(name, 64000, 1<<20).GPUs(whole, "H100").MIG(migGPUs, 7, "H100").Obj()
	n.MIG = &model.NodeMIG{Profiles: h100Profiles}
	return n
}

func migReq(profile string) model.Request {
	return model.Request{MIGSlices: model.ProfileSlices(profile), MIGProfile: profile, MilliCPU: 1000}
}

// on is a running pod holding GPU index of node (a whole GPU, or one
// slice of a MIG GPU).
func on(pod, node string, index int, mig bool) model.Allocation {
	a := model.Allocation{Pod: pod, Group: pod, Node: node, Request: schedtest.GPU(1, 1000), GPUs: []model.GPUShare{{Index: index, Milli: 1000}}}
	if mig {
		a.Request = migReq("1g.10gb")
		a.GPUs = []model.GPUShare{{Index: index, MIGSlices: 1}}
	}
	return a
}

func TestLayoutProposals(t *testing.T) {
	policy := model.LayoutPolicy{MinWait: 10, Dwell: 100, Timeout: 50, MaxPerNode: 2}
	mig7 := func(node string, gpu int) string { return fmt.Sprintf("%s/%d: mig: 7x1g.10gb", node, gpu) }
	whole := func(node string, gpu int) string { return fmt.Sprintf("%s/%d: whole GPU", node, gpu) }
	optOut := func(n model.Node) model.Node { n.MIG = nil; return n }
	withMIG := func(n model.Node, m model.NodeMIG) model.Node { m.Profiles = h100Profiles; n.MIG = &m; return n }
	tests := []struct {
		name    string
		nodes   []model.Node
		running []model.Allocation
		pending []model.PodGroup
		policy  *model.LayoutPolicy
		want    []string
	}{
		{
			name:    "MIG demand re-partitions an idle whole GPU, not the busy one",
			nodes:   []model.Node{migNode("n", 2, 0)},
			running: []model.Allocation{on("busy", "n", 1, false)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("1g.10gb")).Obj()},
			want:    []string{mig7("n", 0)},
		},
		{
			name:    "a node that does not opt in is never proposed for",
			nodes:   []model.Node{optOut(migNode("n", 2, 0))},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("1g.10gb")).Obj()},
		},
		{
			name:    "demand younger than MinWait waits",
			nodes:   []model.Node{migNode("n", 2, 0)},
			pending: []model.PodGroup{schedtest.Group("m").Created(95).Pods(1, migReq("1g.10gb")).Obj()},
		},
		{
			name:    "no idle GPU, no proposal: nothing is evicted for one",
			nodes:   []model.Node{migNode("n", 2, 0)},
			running: []model.Allocation{on("a", "n", 0, false), on("b", "n", 1, false)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("1g.10gb")).Obj()},
		},
		{
			name:    "a profile the node's GPUs do not offer is not proposed",
			nodes:   []model.Node{migNode("n", 2, 0)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("2g.35gb")).Obj()},
		},
		{
			name:    "a GPU proposed for within the dwell time is left alone",
			nodes:   []model.Node{withMIG(migNode("n", 2, 0), model.NodeMIG{Proposals: []gpunode.MIGProposalGPU{{Index: 1, At: 60}}})},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("1g.10gb")).Obj()},
			want:    []string{mig7("n", 0)},
		},
		{
			name: "a pending proposal holds its node and counts as supply",
			nodes: []model.Node{
				withMIG(migNode("a", 2, 0), model.NodeMIG{Proposals: []gpunode.MIGProposalGPU{{Index: 1, MIG: true, Devices: map[string]int{"1g.10gb": 7}, At: 90}}, Pending: []int{1}}),
				migNode("b", 2, 0),
			},
			pending: []model.PodGroup{schedtest.Group("m").Pods(3, migReq("1g.10gb")).Obj()},
		},
		{
			name: "demand beyond a pending proposal's supply goes elsewhere",
			nodes: []model.Node{
				withMIG(migNode("a", 2, 0), model.NodeMIG{Proposals: []gpunode.MIGProposalGPU{{Index: 1, MIG: true, Devices: map[string]int{"1g.10gb": 7}, At: 90}}, Pending: []int{1}}),
				migNode("b", 2, 0),
			},
			pending: []model.PodGroup{schedtest.Group("m").Pods(9, migReq("1g.10gb")).Obj()},
			want:    []string{mig7("b", 1)},
		},
		{
			name:    "a pending proposal past its timeout no longer holds the node",
			nodes:   []model.Node{withMIG(migNode("n", 2, 0), model.NodeMIG{Proposals: []gpunode.MIGProposalGPU{{Index: 1, MIG: true, Devices: map[string]int{"1g.10gb": 7}, At: 40}}, Pending: []int{1}})},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("1g.10gb")).Obj()},
			want:    []string{mig7("n", 0)},
		},
		{
			name:    "at most MaxPerNode GPUs of a node per cycle",
			nodes:   []model.Node{migNode("n", 4, 0)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(20, migReq("1g.10gb")).Obj()},
			want:    []string{mig7("n", 3), mig7("n", 2)},
		},
		{
			name:    "as many GPUs as the demand needs, no more",
			nodes:   []model.Node{migNode("n", 4, 0)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(6, migReq("3g.40gb")).Obj()},
			policy:  &model.LayoutPolicy{MinWait: 10, MaxPerNode: 8},
			want:    []string{"n/3: mig: 2x3g.40gb", "n/2: mig: 2x3g.40gb", "n/1: mig: 2x3g.40gb"},
		},
		{
			name:    "reverse: whole-GPU demand turns an idle MIG GPU whole",
			nodes:   []model.Node{migNode("n", 1, 2)},
			running: []model.Allocation{on("a", "n", 0, false), on("m", "n", 1, true)},
			pending: []model.PodGroup{schedtest.Group("w").Pods(1, schedtest.GPU(1, 1000)).Obj()},
			want:    []string{whole("n", 2)},
		},
		{
			name:    "reverse: a MIG GPU with a MIG pod on it stays",
			nodes:   []model.Node{migNode("n", 1, 1)},
			running: []model.Allocation{on("a", "n", 0, false), on("m", "n", 1, true)},
			pending: []model.PodGroup{schedtest.Group("w").Pods(1, schedtest.GPU(1, 1000)).Obj()},
		},
		{
			name:    "a MIG pod that fits as things are asks for nothing",
			nodes:   []model.Node{migNode("n", 1, 1)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, migReq("1g.10gb")).Obj()},
		},
		{
			name:    "a node whose selector the pod does not match is not proposed for",
			nodes:   []model.Node{migNode("n", 2, 0)},
			pending: []model.PodGroup{schedtest.Group("m").Pods(1, schedtest.Confined(migReq("1g.10gb"), "pool", "other")).Obj()},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy
			if tc.policy != nil {
				pol = *tc.policy
			}
			snap := model.Snapshot{Nodes: tc.nodes, RunningByNode: schedtest.OnNodes(tc.nodes, tc.running...), Pending: tc.pending, Now: 100, Layouts: pol}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range d.Layouts {
				got = append(got, fmt.Sprintf("%s/%d: %s", l.Node, l.Index, l.String()))
				if l.At != snap.Now || len(l.For) == 0 {
					t.Errorf("proposal %+v: want At %d and the groups it is for", l, snap.Now)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("proposals %q, want %q", got, tc.want)
			}
		})
	}
}

// TestLayoutProposalReplay runs the proposal through model.Apply and
// CompleteLayouts, as the simulator does: the proposing cycle leaves the
// GPU out of service, the next cycles propose nothing more while the node
// has not reported the layout, and once it has, the MIG pod is bound on
// the re-partitioned GPU while the pod on the other keeps its GPU.
func TestLayoutProposalReplay(t *testing.T) {
	snap := model.Snapshot{
		Nodes:         []model.Node{migNode("n", 2, 0)},
		RunningByNode: [][]model.Allocation{{on("busy", "n", 0, false)}},
		Pending:       []model.PodGroup{schedtest.Group("m").Pods(2, migReq("1g.10gb")).Obj()},
		Layouts:       model.LayoutPolicy{MinWait: 1, Dwell: 100, Timeout: 50},
		Now:           10,
	}
	h, err := schedtest.NewHarness(snap, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	step := func(now int64) model.Decisions {
		t.Helper()
		h.Snap.Now = now
		d, err := h.Cycle()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := step(10)
	if len(d.Layouts) != 1 || d.Layouts[0].Index != 1 || len(d.Binds) != 0 {
		t.Fatalf("first cycle: layouts %+v, binds %+v", d.Layouts, d.Binds)
	}
	if g := h.Snap.Nodes[0].GPUs[1]; !g.Repartitioning || g.MIGSlices != 0 {
		t.Fatalf("after Apply GPU 1 is %+v, want it repartitioning, still whole", g)
	}
	if d := step(11); len(d.Layouts) != 0 || len(d.Binds) != 0 {
		t.Fatalf("while pending: layouts %+v, binds %+v", d.Layouts, d.Binds)
	}
	if n := model.CompleteLayouts(&h.Snap, 5); n != 0 {
		t.Fatalf("CompleteLayouts before the proposal's time changed %d GPUs", n)
	}
	if n := model.CompleteLayouts(&h.Snap, 12); n != 1 {
		t.Fatalf("CompleteLayouts changed %d GPUs, want 1", n)
	}
	if g := h.Snap.Nodes[0].GPUs[1]; g.Repartitioning || g.MIGSlices != 7 || g.MIGInstanceSlices != 1 {
		t.Fatalf("after CompleteLayouts GPU 1 is %+v, want 7 instances of 1 slice", g)
	}
	d = step(12)
	if len(d.Binds) != 2 || len(d.Layouts) != 0 {
		t.Fatalf("after the layout: binds %+v, layouts %+v", d.Binds, d.Layouts)
	}
	for _, b := range d.Binds {
		if len(b.GPUs) != 1 || b.GPUs[0].Index != 1 || b.GPUs[0].MIGSlices != 1 {
			t.Errorf("bind %+v, want one slice of GPU 1", b)
		}
	}
	for a := range h.Snap.AllRunning() {
		if a.Pod == "busy" && a.GPUs[0].Index != 0 {
			t.Errorf("the pod on GPU 0 moved: %+v", a)
		}
	}
}
