package scheduler_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

const hostKey, zoneKey = "kubernetes.io/hostname", "topology.kubernetes.io/zone"

// zonedNodes returns count nodes of gpus GPUs each, with hostname labels
// and zones z0, z1, ... round robin over zones.
func zonedNodes(count, zones, gpus int) []model.Node {
	out := schedtest.Cluster("n", count, gpus, 64000, 1<<20)
	for i := range out {
		out[i].Labels = map[string]string{hostKey: out[i].Name, zoneKey: fmt.Sprintf("z%d", i%zones)}
	}
	return out
}

func sel(kv ...string) *model.LabelSelector {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &model.LabelSelector{MatchLabels: m}
}

func term(key string, s *model.LabelSelector) model.PodAffinityTerm {
	return model.PodAffinityTerm{Selector: s, Namespaces: []string{"ns"}, TopologyKey: key}
}

// labelled is req in namespace ns with labels kv.
func labelled(req model.Request, kv ...string) model.Request {
	req.Namespace = "ns"
	req.Labels = maps.Clone(sel(kv...).MatchLabels)
	return req
}

func lone(name string, req model.Request) model.PodGroup {
	return model.PodGroup{Name: name, Pods: []model.Pod{{Name: name, Request: req}}, Explain: true}
}

// runCycle runs one cycle on snap and returns its decisions and where each
// bound pod went.
func runCycle(t *testing.T, snap model.Snapshot) (model.Decisions, map[string]string) {
	t.Helper()
	h, err := schedtest.NewHarness(snap, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]string{}
	for _, b := range d.Binds {
		at[b.Pod] = b.Node
	}
	return d, at
}

func perValue(nodes []model.Node, at map[string]string, key string) map[string]int {
	byName := map[string]*model.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	out := map[string]int{}
	for _, n := range at {
		out[byName[n].Labels[key]]++
	}
	return out
}

func TestRequiredPodAntiAffinity(t *testing.T) {
	nodes := zonedNodes(6, 3, 8)
	req := labelled(schedtest.GPU(1, 1000), "app", "worker")
	req.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(hostKey, sel("app", "worker"))}}
	var pending []model.PodGroup
	for i := range 8 {
		pending = append(pending, lone(fmt.Sprintf("p%d", i), req))
	}
	d, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: pending})
	if len(at) != 6 || len(perValue(nodes, at, hostKey)) != 6 {
		t.Fatalf("bound %v, want 6 pods on 6 distinct nodes", at)
	}
	if len(d.Unplaced) != 2 {
		t.Fatalf("unplaced %+v, want 2", d.Unplaced)
	}
	for _, u := range d.Unplaced {
		if len(u.Filtered) != 1 || u.Filtered[0] != (model.FilterCount{Filter: placement.FilterPodAntiAffinity, Nodes: 6}) {
			t.Errorf("%s: filtered %+v, want every node refused for pod anti-affinity", u.Group, u.Filtered)
		}
	}
}

func TestExistingPodsAntiAffinity(t *testing.T) {
	nodes := zonedNodes(2, 2, 8)
	guard := labelled(schedtest.GPU(1, 1000), "app", "guard")
	guard.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(zoneKey, sel("app", "web"))}}
	run := []model.Allocation{{Pod: "guard", Group: "guard", Node: "n-0", Request: guard, GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}}
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Pending: []model.PodGroup{
		lone("web", labelled(schedtest.GPU(1, 1000), "app", "web")),
		lone("other", labelled(schedtest.GPU(1, 1000), "app", "other")),
		lone("web-elsewhere", func() model.Request {
			r := labelled(schedtest.GPU(1, 1000), "app", "web")
			r.Namespace = "ns2"
			return r
		}()),
	}}
	_, at := runCycle(t, snap)
	// Packing would put every pod next to the guard (its node is the one
	// in use); the guard's anti-affinity keeps web, of its namespace, out
	// of its zone only.
	if at["web"] != "n-1" || at["other"] != "n-0" || at["web-elsewhere"] != "n-0" {
		t.Fatalf("placed %v, want web on n-1, other and web-elsewhere on n-0", at)
	}
}

func TestRequiredPodAffinity(t *testing.T) {
	nodes := zonedNodes(4, 4, 8)
	// n-0 is the fullest: packing sends new pods there.
	run := []model.Allocation{
		{Pod: "busy", Group: "busy", Node: "n-0", Request: schedtest.GPU(1, 1000), GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}},
		{Pod: "db", Group: "db", Node: "n-2", Request: labelled(model.Request{MilliCPU: 100}, "app", "db")},
	}
	follower := labelled(schedtest.GPU(1, 1000), "app", "client")
	follower.Affinity = &model.PodAffinity{Required: []model.PodAffinityTerm{term(hostKey, sel("app", "db"))}}
	snap := model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, run...), Pending: []model.PodGroup{
		lone("plain", schedtest.GPU(1, 1000)),
		lone("follower", follower),
	}}
	_, at := runCycle(t, snap)
	if at["plain"] != "n-0" {
		t.Fatalf("plain went to %q; the test needs packing to prefer n-0", at["plain"])
	}
	if at["follower"] != "n-2" {
		t.Fatalf("follower went to %q, want n-2 beside db", at["follower"])
	}
	// With no db anywhere, the follower (which does not match its own
	// term) waits.
	snap.RunningByNode = schedtest.OnNodes(nodes, run[0])
	d, at := runCycle(t, snap)
	if _, ok := at["follower"]; ok || len(d.Unplaced) != 1 {
		t.Fatalf("follower placed at %v without a db; unplaced %+v", at, d.Unplaced)
	}
	if f := d.Unplaced[0].Filtered; len(f) != 1 || f[0].Filter != placement.FilterPodAffinity {
		t.Fatalf("filtered %+v, want pod affinity", f)
	}
}

func TestSelfAffineGroupStartsAnywhere(t *testing.T) {
	nodes := zonedNodes(6, 3, 1)
	req := labelled(schedtest.GPU(1, 1000), "app", "ring")
	req.Affinity = &model.PodAffinity{Required: []model.PodAffinityTerm{term(zoneKey, sel("app", "ring"))}}
	var pending []model.PodGroup
	for i := range 3 {
		pending = append(pending, lone(fmt.Sprintf("p%d", i), req))
	}
	_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: pending})
	// Two nodes per zone with one GPU each: two pods fit in the zone the
	// first one chose; the third has no room beside them.
	if len(at) != 2 || len(perValue(nodes, at, zoneKey)) != 1 {
		t.Fatalf("placed %v, want 2 pods in one zone", at)
	}
}

func TestGangMembersRepelEachOther(t *testing.T) {
	req := labelled(schedtest.GPU(1, 1000), "job", "train")
	req.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(hostKey, sel("job", "train"))}}
	gang := schedtest.Group("train").MinMember(4).Pods(4, req).Obj()
	t.Run("fits on four nodes, one each", func(t *testing.T) {
		nodes := zonedNodes(4, 2, 8)
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{gang}})
		if len(at) != 4 || len(perValue(nodes, at, hostKey)) != 4 {
			t.Fatalf("placed %v, want 4 pods on 4 nodes", at)
		}
	})
	t.Run("three nodes place nothing", func(t *testing.T) {
		nodes := zonedNodes(3, 2, 8)
		d, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{gang}})
		if len(at) != 0 || len(d.Unplaced) != 1 {
			t.Fatalf("placed %v, unplaced %+v; want the gang whole or not at all", at, d.Unplaced)
		}
	})
}

func TestPodNextToGangLeader(t *testing.T) {
	nodes := zonedNodes(4, 2, 2)
	leader := labelled(schedtest.GPU(1, 1000), "job", "j", "role", "leader")
	worker := labelled(schedtest.GPU(1, 1000), "job", "j", "role", "worker")
	worker.Affinity = &model.PodAffinity{Required: []model.PodAffinityTerm{term(zoneKey, sel("job", "j", "role", "leader"))}}
	g := model.PodGroup{Name: "j", Pods: []model.Pod{{Name: "leader", Request: leader}}}
	for i := range 3 {
		g.Pods = append(g.Pods, model.Pod{Name: fmt.Sprintf("w%d", i), Request: worker})
	}
	_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{g}})
	if len(at) != 4 || len(perValue(nodes, at, zoneKey)) != 1 {
		t.Fatalf("placed %v, want the leader and its 3 workers in one zone", at)
	}
}

func TestTopologySpread(t *testing.T) {
	spread := func(maxSkew, minDomains int32) model.Request {
		r := labelled(schedtest.GPU(1, 1000), "app", "svc")
		r.Spread = []model.SpreadConstraint{{MaxSkew: maxSkew, TopologyKey: zoneKey, Selector: sel("app", "svc"), MinDomains: minDomains}}
		return r
	}
	t.Run("six pods over three zones", func(t *testing.T) {
		nodes := zonedNodes(6, 3, 8)
		var pending []model.PodGroup
		for i := range 6 {
			pending = append(pending, lone(fmt.Sprintf("p%d", i), spread(1, 0)))
		}
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: pending})
		if got := perValue(nodes, at, zoneKey); len(at) != 6 || got["z0"] != 2 || got["z1"] != 2 || got["z2"] != 2 {
			t.Fatalf("per zone %v, want 2/2/2", got)
		}
	})
	t.Run("a gang spread over zones", func(t *testing.T) {
		nodes := zonedNodes(6, 3, 8)
		g := schedtest.Group("g").Pods(6, spread(1, 0)).Obj()
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{g}})
		if got := perValue(nodes, at, zoneKey); len(at) != 6 || got["z0"] != 2 || got["z1"] != 2 || got["z2"] != 2 {
			t.Fatalf("per zone %v, want 2/2/2", got)
		}
	})
	t.Run("minDomains above the zones there are", func(t *testing.T) {
		nodes := zonedNodes(4, 2, 8)
		var pending []model.PodGroup
		for i := range 3 {
			pending = append(pending, lone(fmt.Sprintf("p%d", i), spread(1, 3)))
		}
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: pending})
		// Two zones are fewer than three: the global minimum counts as 0,
		// so each zone takes one pod.
		if got := perValue(nodes, at, zoneKey); len(at) != 2 || got["z0"] != 1 || got["z1"] != 1 {
			t.Fatalf("per zone %v, want one pod in each of the two zones", got)
		}
	})
	t.Run("only counted nodes make the minimum", func(t *testing.T) {
		// z0 holds n-0 (pool a, empty) and n-3 (pool b, two pods); z1
		// holds n-1 (pool a, one pod); z2 holds n-2 (pool b, empty).
		nodes := zonedNodes(4, 3, 8)
		for i, pool := range []string{"a", "a", "b", "b"} {
			nodes[i].Labels["pool"] = pool
		}
		svc := labelled(model.Request{MilliCPU: 1}, "app", "svc")
		run := schedtest.OnNodes(nodes,
			model.Allocation{Pod: "r1", Group: "r1", Node: "n-1", Request: svc},
			model.Allocation{Pod: "r3", Group: "r3", Node: "n-3", Request: svc},
			model.Allocation{Pod: "r4", Group: "r4", Node: "n-3", Request: svc})
		for _, policy := range []struct {
			name  string
			nodes map[string]string
			want  string
		}{
			// Pool a only: z0 counts 0, z1 counts 1; z0 is the place.
			{"nodeAffinityPolicy Honor", map[string]string{"pool": "a"}, "n-0"},
			// Every node: z2's 0 is the minimum, z0 counts 2 and z1 1,
			// and the pod may not go to z2's pool b.
			{"nodeAffinityPolicy Ignore", nil, ""},
		} {
			t.Run(policy.name, func(t *testing.T) {
				r := spread(1, 0)
				r.NodeSelector = map[string]string{"pool": "a"}
				r.Spread[0].Nodes = policy.nodes
				_, at := runCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: run, Pending: []model.PodGroup{lone("p", r)}})
				if at["p"] != policy.want {
					t.Fatalf("placed on %q, want %q", at["p"], policy.want)
				}
			})
		}
	})
	t.Run("a node without the key is refused", func(t *testing.T) {
		nodes := zonedNodes(2, 2, 8)
		delete(nodes[0].Labels, zoneKey)
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, Pending: []model.PodGroup{
			lone("p0", spread(5, 0)), lone("p1", spread(5, 0)),
		}})
		if at["p0"] != "n-1" || at["p1"] != "n-1" {
			t.Fatalf("placed %v, want both on n-1, the node with a zone", at)
		}
	})
}

func TestPreferencesBreakTiesOnly(t *testing.T) {
	nodes := zonedNodes(4, 4, 8)
	db := model.Allocation{Pod: "db", Group: "db", Node: "n-2", Request: labelled(model.Request{MilliCPU: 100}, "app", "db")}
	pref := labelled(schedtest.GPU(1, 1000), "app", "client")
	pref.Affinity = &model.PodAffinity{Preferred: []model.PodAffinityTerm{{Selector: sel("app", "db"), Namespaces: []string{"ns"}, TopologyKey: hostKey, Weight: 10}}}
	t.Run("among equal nodes the preferred one", func(t *testing.T) {
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, db), Pending: []model.PodGroup{lone("p", pref)}})
		if at["p"] != "n-2" {
			t.Fatalf("placed on %q, want n-2 beside db", at["p"])
		}
	})
	t.Run("GPU placement first", func(t *testing.T) {
		busy := model.Allocation{Pod: "busy", Group: "busy", Node: "n-0", Request: schedtest.GPU(1, 1000), GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, db, busy), Pending: []model.PodGroup{lone("p", pref)}})
		if at["p"] != "n-0" {
			t.Fatalf("placed on %q, want n-0, where packing puts it", at["p"])
		}
	})
	t.Run("ScheduleAnyway spreads among equal nodes", func(t *testing.T) {
		soft := labelled(model.Request{MilliCPU: 100}, "app", "svc")
		soft.Spread = []model.SpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey, Selector: sel("app", "svc"), ScheduleAnyway: true}}
		run := schedtest.OnNodes(nodes,
			model.Allocation{Pod: "r0", Group: "r0", Node: "n-0", Request: soft},
			model.Allocation{Pod: "r1", Group: "r1", Node: "n-1", Request: soft},
			model.Allocation{Pod: "r3", Group: "r3", Node: "n-3", Request: soft})
		_, at := runCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: run, Pending: []model.PodGroup{lone("p", soft)}})
		if at["p"] != "n-2" {
			t.Fatalf("placed on %q, want n-2, the zone without a pod", at["p"])
		}
	})
}

// TestPreemptionFreesAnAntiAffinity: a preemptor that fits by resources
// but is repelled by a lower-priority pod evicts that pod, and while it
// waits for it to exit, its held place repels a newcomer it repels.
func TestPreemptionFreesAnAntiAffinity(t *testing.T) {
	nodes := zonedNodes(1, 1, 8)
	low := labelled(schedtest.GPU(1, 1000), "app", "x")
	high := labelled(schedtest.GPU(1, 1000), "app", "boss")
	high.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(hostKey, sel("app", "x"))}}
	snap := model.Snapshot{Nodes: nodes, Budget: model.DisruptionBudget{MaxEvictions: -1},
		RunningByNode: schedtest.OnNodes(nodes, model.Allocation{Pod: "low", Group: "low", Priority: 1, Node: "n-0", Request: low, GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}),
		Pending:       []model.PodGroup{{Name: "high", Priority: 10, Pods: []model.Pod{{Name: "high", Request: high}}}}}
	h, err := schedtest.NewHarness(snap, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := h.Sched
	d, err := s.Cycle(&h.Snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Evictions) != 1 || d.Evictions[0].Pod != "low" || len(d.Holds) != 1 {
		t.Fatalf("evictions %+v holds %+v, want low evicted for high", d.Evictions, d.Holds)
	}
	// The victim has not exited yet; a newcomer of app=x arrives. The
	// held place of high repels it.
	next := h.Snap
	next.Holds = d.Holds
	next.Pending = append(slices.Clone(next.Pending), lone("x2", low))
	d2, err := s.Cycle(&next)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range d2.Binds {
		if b.Pod == "x2" {
			t.Fatalf("x2 bound to %s beside the preemptor waiting there", b.Node)
		}
	}
}

// TestRelabelledRunningPod: a running pod whose labels change between
// snapshots counts under its new labels from then on.
func TestRelabelledRunningPod(t *testing.T) {
	nodes := zonedNodes(2, 2, 8)
	x := model.Allocation{Pod: "x", Group: "x", Node: "n-0", Request: labelled(schedtest.GPU(1, 1000), "app", "x"), GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, x)}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Cycle(); err != nil {
		t.Fatal(err)
	}
	x.Request = labelled(schedtest.GPU(1, 1000), "app", "y")
	h.Snap.RunningByNode = schedtest.OnNodes(nodes, x)
	shy := labelled(schedtest.GPU(1, 1000), "app", "shy")
	shy.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(hostKey, sel("app", "x"))}}
	h.Snap.Pending = []model.PodGroup{lone("shy", shy)}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	// Packing prefers n-0, the node in use, now that no app=x runs there.
	if len(d.Binds) != 1 || d.Binds[0].Node != "n-0" {
		t.Fatalf("binds %+v, want shy on n-0", d.Binds)
	}
}

// TestTerminatingRunningPod: once a running pod is being deleted, the
// next cycle's spread constraints no longer count it (its node's pods
// come in a new chunk, the pod otherwise the same), while anti-affinity
// still sees it, as kube-scheduler's filters read a terminating pod.
func TestTerminatingRunningPod(t *testing.T) {
	nodes := zonedNodes(2, 2, 8)
	web := model.Allocation{Pod: "web", Group: "web", Node: "n-0", Request: labelled(schedtest.GPU(1, 1000), "app", "web"), GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}
	spread := labelled(schedtest.GPU(1, 1000), "app", "web")
	spread.Spread = []model.SpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey, Selector: sel("app", "web")}}
	spread.NodeSelector = map[string]string{zoneKey: "z0"}
	shy := labelled(schedtest.GPU(1, 1000), "app", "shy")
	shy.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(zoneKey, sel("app", "web"))}}
	shy.NodeSelector = map[string]string{zoneKey: "z0"}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, web),
		Pending: []model.PodGroup{lone("spread", spread), lone("shy", shy)}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 0 {
		t.Fatalf("binds %+v while web runs in z0, want none", d.Binds)
	}
	web.Request.Terminating = true
	h.Snap.RunningByNode = schedtest.OnNodes(nodes, web)
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 1 || d.Binds[0].Pod != "spread" || d.Binds[0].Node != "n-0" {
		t.Fatalf("binds %+v, want spread on n-0 beside the terminating web pod, and shy still repelled", d.Binds)
	}
}

// A pod evicted in a cycle runs until it exits: other pods' anti-affinity
// still sees it for the rest of that cycle. p evicts v to keep its own
// anti-affinity and waits for it; q repels v too and may evict w, which
// would not help it, so it is neither bound beside v nor evicts w.
func TestEvictedPodStillRepelsInItsCycle(t *testing.T) {
	nodes := zonedNodes(1, 1, 8)
	v := model.Allocation{Pod: "v", Group: "v", Node: "n-0", Request: labelled(schedtest.GPU(1, 1000), "app", "v"), GPUs: []model.GPUShare{{Index: 0, Milli: 1000}}}
	w := model.Allocation{Pod: "w", Group: "w", Node: "n-0", Request: labelled(schedtest.GPU(1, 1000), "app", "w"), GPUs: []model.GPUShare{{Index: 1, Milli: 1000}}}
	shy := func(name string, prio int32) model.PodGroup {
		req := labelled(schedtest.GPU(1, 1000), "app", name)
		req.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term(hostKey, sel("app", "v"))}}
		g := lone(name, req)
		g.Priority = prio
		return g
	}
	_, d := harnessCycle(t, model.Snapshot{Nodes: nodes, RunningByNode: schedtest.OnNodes(nodes, v, w), Budget: model.DisruptionBudget{MaxEvictions: -1},
		Pending: []model.PodGroup{shy("p", 50), shy("q", 10)}}, scheduler.Config{})
	if len(d.Evictions) != 1 || d.Evictions[0].Pod != "v" || len(d.Holds) != 1 || d.Holds[0].Group != "p" {
		t.Fatalf("evictions %+v, holds %+v; want v evicted for p, which waits", d.Evictions, d.Holds)
	}
	if len(d.Binds) != 0 {
		t.Fatalf("binds %+v beside v, which still runs", d.Binds)
	}
}
