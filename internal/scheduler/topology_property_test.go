package scheduler_test

import (
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

const (
	propZone = "zone"
	propRack = "rack"
	propHost = "host"
)

var propLevels = []string{propZone, propRack, propHost}

// genTopologyWorkload draws a small labelled cluster (some nodes lack the
// rack label, some carry their labels in Domains, racks may repeat a name
// across zones), two queues, and gangs with random topologies, sizes and
// priorities; the second return arrives after the first cycle, with higher
// priorities, to preempt.
func genTopologyWorkload(t *rapid.T) (model.Snapshot, []model.PodGroup) {
	var snap model.Snapshot
	for i := range rapid.IntRange(2, 10).Draw(t, "nodes") {
		n := schedtest.Node(fmt.Sprintf("n%d", i), rapid.Int64Range(8, 64).Draw(t, "cpu")*1000, 1<<20).
			GPUs(rapid.SampledFrom([]int{0, 2, 4, 8}).Draw(t, "gpus"), "H100").Obj()
		labels := map[string]string{propZone: fmt.Sprintf("z%d", rapid.IntRange(0, 1).Draw(t, "zone")), propHost: n.Name}
		if rapid.IntRange(0, 5).Draw(t, "noRack") > 0 {
			labels[propRack] = fmt.Sprintf("r%d", rapid.IntRange(0, 2).Draw(t, "rack"))
		}
		if rapid.Bool().Draw(t, "inDomains") {
			n.Domains = labels
		} else {
			n.Labels = labels
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	snap.Queues = []model.Queue{{Name: "a", Guaranteed: model.Resources{GPUMilli: 8000}}, {Name: "b"}}
	snap.Budget.MaxEvictions = rapid.SampledFrom([]int{-1, 0, 4}).Draw(t, "budget")
	topologies := []*model.GangTopology{
		nil,
		{Levels: propLevels, Required: propRack},
		{Levels: propLevels, Required: propZone},
		{Levels: propLevels, Preferred: propRack},
		{Levels: propLevels, Required: propZone, Preferred: propRack},
		{Levels: propLevels, Required: propZone, SliceRequired: propRack, SliceSize: 2},
		{Levels: propLevels, SliceRequired: propHost},
		{Levels: propLevels, Required: propHost},
	}
	group := func(name string, prio int32, created int64) model.PodGroup {
		b := schedtest.Group(name).Queue(rapid.SampledFrom([]string{"a", "b"}).Draw(t, "queue")).Priority(prio).Created(created)
		var req model.Request
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			req = schedtest.GPU(rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "whole"), 1000)
		case 1:
			req = schedtest.Share(rapid.Int64Range(1, 9).Draw(t, "milli")*100, 1000)
		default:
			req = model.Request{MilliCPU: 4000}
		}
		size := rapid.IntRange(1, 5).Draw(t, "size")
		b.Pods(size, req)
		if rapid.IntRange(0, 3).Draw(t, "partial") == 0 {
			b.MinMember(rapid.IntRange(1, size).Draw(t, "min"))
		}
		if tp := rapid.SampledFrom(topologies).Draw(t, "topology"); tp != nil {
			b.Topology(*tp)
		}
		g := b.Obj()
		if g.Topology != nil && g.Topology.SliceRequired != "" && g.Topology.SliceSize == 0 {
			// Named slices; a pod with no name is in none.
			for k := range g.Pods {
				g.Pods[k].Slice = rapid.SampledFrom([]string{"", "s0", "s1"}).Draw(t, "slice")
			}
		}
		return g
	}
	for i := range rapid.IntRange(1, 8).Draw(t, "groups") {
		snap.Pending = append(snap.Pending, group(fmt.Sprintf("g%d", i), int32(rapid.IntRange(0, 2).Draw(t, "prio")), int64(i)))
	}
	var later []model.PodGroup
	for i := range rapid.IntRange(0, 4).Draw(t, "later") {
		later = append(later, group(fmt.Sprintf("h%d", i), int32(rapid.IntRange(2, 5).Draw(t, "laterPrio")), int64(100+i)))
	}
	return snap, later
}

// checkTopology fails t if a placement of d (a bind or a held plan),
// together with the group's pods already running, leaves a gang's pods in
// more than one domain of its required level (by the key's value, as a
// user reads it) or on a node without that level, or a slice of the pods
// the cycle saw pending in more than one domain of its slice level.
func checkTopology(t *rapid.T, before *model.Snapshot, d *model.Decisions) {
	nodes := map[string]*model.Node{}
	for i := range before.Nodes {
		nodes[before.Nodes[i].Name] = &before.Nodes[i]
	}
	value := func(node, key string) string {
		v, ok := placement.DomainValue(nodes[node], key)
		if !ok {
			t.Fatalf("a pod placed on %s, which has no %s label", node, key)
		}
		return v
	}
	placedOn := map[string]map[string]string{} // group -> pod -> node
	for _, b := range schedtest.Planned(d) {
		if placedOn[b.Group] == nil {
			placedOn[b.Group] = map[string]string{}
		}
		placedOn[b.Group][b.Pod] = b.Node
	}
	for i := range before.Pending {
		g := &before.Pending[i]
		on := placedOn[g.Name]
		if g.Topology == nil || len(on) == 0 {
			continue
		}
		tp := g.Topology
		if tp.Required != "" {
			want := ""
			check := func(pod, node string) {
				v := value(node, tp.Required)
				if want == "" {
					want = v
				} else if v != want {
					t.Fatalf("gang %s (required %s): pod %s on %s in %q, another in %q", g.Name, tp.Required, pod, node, v, want)
				}
			}
			for a := range before.AllRunning() {
				if a.Group == g.Name {
					check(a.Pod, a.Node)
				}
			}
			for pod, node := range on {
				check(pod, node)
			}
		}
		if tp.SliceRequired == "" {
			continue
		}
		sliceOf := func(k int) string {
			if tp.SliceSize > 0 {
				return fmt.Sprint(k / tp.SliceSize)
			}
			return g.Pods[k].Slice
		}
		where := map[string]string{}
		count := map[string]int{}
		for k, pod := range g.Pods {
			s := sliceOf(k)
			count[s]++
			node, ok := on[pod.Name]
			if !ok || s == "" {
				continue
			}
			count[s+"/placed"]++
			v := value(node, tp.SliceRequired)
			if w, seen := where[s]; seen && w != v {
				t.Fatalf("gang %s: slice %s over %q and %q of %s", g.Name, s, w, v, tp.SliceRequired)
			}
			where[s] = v
		}
		for s := range where {
			if count[s+"/placed"] != count[s] {
				t.Fatalf("gang %s: slice %s placed in part, %d of %d pods", g.Name, s, count[s+"/placed"], count[s])
			}
		}
	}
}

// TestPropertyTopologyHolds: on random labelled clusters with random
// topology gangs, no cycle (preemptions and holds included) places a gang
// outside one domain of its required level or a slice outside one domain
// of its slice level, nothing is over-allocated, gangs stay whole, the
// cycles settle, and a snapshot always gets the same decisions.
func TestPropertyTopologyHolds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, later := genTopologyWorkload(t)
		// The same snapshot, the same decisions.
		once := func() model.Decisions {
			d := cycleOnce(t, &snap)
			d.Timings = nil
			return d
		}
		if a, b := once(), once(); !reflect.DeepEqual(a, b) {
			t.Fatalf("same snapshot, different decisions:\n%+v\n%+v", a, b)
		}
		h, err := schedtest.NewHarness(snap, scheduler.Config{Policy: rapid.SampledFrom([]string{"gpuplane", "bestfit"}).Draw(t, "policy")})
		if err != nil {
			t.Fatal(err)
		}
		step := func() model.Decisions {
			before := h.Snap
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			checkDecisions(t, &before, d)
			checkInvariants(t, &h.Snap)
			checkTopology(t, &before, &d)
			return d
		}
		step()
		h.Snap.Pending = append(h.Snap.Pending, later...)
		for i := 0; ; i++ {
			d := step()
			if len(d.Evictions) == 0 && len(d.Binds) == 0 && len(d.Holds) == 0 {
				break
			}
			if i > 60 {
				t.Fatalf("no fixed point after %d cycles", i)
			}
		}
	})
}
