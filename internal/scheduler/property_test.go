package scheduler_test

import (
	"fmt"
	"iter"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// genWorkload draws a small cluster, a queue tree and pending groups; the
// second return is a batch that arrives after the first cycle. Some nodes
// form a pool (labelled and tainted pool=batch) that only groups confined
// to it or tolerating its taint use, and GPUs come in two models.
func genWorkload(t *rapid.T) (model.Snapshot, []model.PodGroup) {
	var snap model.Snapshot
	for i := range rapid.IntRange(1, 5).Draw(t, "nodes") {
		b := schedtest.Node(fmt.Sprintf("n%d", i), rapid.Int64Range(8, 64).Draw(t, "cpu")*1000, 1<<20).
			GPUs(rapid.IntRange(0, 4).Draw(t, "gpus"), rapid.SampledFrom([]string{"A100", "A100", "V100"}).Draw(t, "model"))
		if rapid.Bool().Draw(t, "pool") {
			b.Label("pool", "batch").Taint("pool", "batch", "NoSchedule")
		}
		n := b.Obj()
		// A node in four has yet to register its GPUs.
		n.Coming = rapid.IntRange(0, 3).Draw(t, "coming") == 0
		if rapid.Bool().Draw(t, "mig") {
			for g := range n.GPUs {
				if g%2 == 0 {
					n.GPUs[g].MIGSlices = 7
				}
			}
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	queues := []string{"a", "b", "c"}
	snap.Queues = []model.Queue{{Name: "org"}}
	for _, q := range queues {
		snap.Queues = append(snap.Queues, model.Queue{Name: q, Parent: "org",
			Guaranteed: model.Resources{GPUMilli: rapid.Int64Range(0, 4).Draw(t, "guar") * 1000},
			Limit:      model.Resources{GPUMilli: rapid.SampledFrom([]int64{0, 4000, 8000}).Draw(t, "limit")},
			Weight:     float64(rapid.IntRange(1, 3).Draw(t, "weight")),
			Weights:    model.ResourceWeights{GPUMilli: float64(rapid.IntRange(0, 3).Draw(t, "gpuWeight"))},
			// Policies over time: the harness's clock starts pods at 1, 2,
			// ... and the snapshot's Now stays 5, so some groups are
			// younger than these minimum runtimes and some are not.
			UsageHalfLife: rapid.SampledFrom([]int64{0, 100}).Draw(t, "halfLife"),
			MinRuntime:    rapid.SampledFrom([]int64{0, 0, 3, 6}).Draw(t, "minRuntime")})
		snap.Usage = append(snap.Usage, model.QueueUsage{Queue: q, GPUMilli: float64(rapid.Int64Range(0, 8).Draw(t, "past") * 1000), At: 5})
	}
	snap.Now = 5
	snap.VictimsByAge = rapid.Bool().Draw(t, "victimsByAge")
	snap.Budget.MaxEvictions = rapid.SampledFrom([]int{-1, 0, 2, 8}).Draw(t, "budget")
	// Defragmentation: off, or a few moves per window; a window of 1 lets
	// every cycle (10 apart, stepNow) move again, so only the rule that a
	// move places a waiting group can bound the moves.
	snap.Defrag = model.DefragPolicy{MaxMoves: rapid.SampledFrom([]int{0, 1, 4}).Draw(t, "moves"), Window: rapid.SampledFrom([]int64{1, 1000}).Draw(t, "window")}
	group := func(i int, prefix string, created int64) model.PodGroup {
		b := schedtest.Group(fmt.Sprintf("%s%d", prefix, i)).Queue(rapid.SampledFrom(append(queues, "")).Draw(t, "queue")).
			Priority(int32(rapid.IntRange(0, 3).Draw(t, "prio"))).Created(created)
		var req model.Request
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 3:
			req = model.Request{MIGSlices: rapid.SampledFrom([]int{1, 2, 3, 4, 7}).Draw(t, "slices"), MilliCPU: 500}
		case 0:
			req = schedtest.Share(rapid.Int64Range(1, 9).Draw(t, "milli")*100, 1000)
		case 1:
			req = schedtest.GPU(rapid.IntRange(1, 2).Draw(t, "whole"), 2000)
		default:
			req = model.Request{MilliCPU: 4000}
		}
		switch rapid.IntRange(0, 3).Draw(t, "placement") {
		case 0:
			req = schedtest.Confined(req, "pool", "batch")
		case 1:
			req.Tolerations = []model.Toleration{{Key: "pool", Exists: true}}
		}
		if req.UsesGPU() && rapid.IntRange(0, 3).Draw(t, "pickModel") == 0 {
			req.GPUModels = []string{rapid.SampledFrom([]string{"A100", "V100"}).Draw(t, "gpuModel")}
		}
		size := rapid.IntRange(1, 3).Draw(t, "size")
		b.Pods(size, req)
		if rapid.Bool().Draw(t, "partial") {
			b.MinMember(rapid.IntRange(1, size).Draw(t, "min"))
		}
		g := b.Obj()
		g.MinRuntime = rapid.SampledFrom([]int64{0, 0, 5}).Draw(t, "classMinRuntime")
		g.Movable = rapid.Bool().Draw(t, "movable")
		return g
	}
	for i := range rapid.IntRange(1, 10).Draw(t, "groups") {
		snap.Pending = append(snap.Pending, group(i, "g", int64(i)))
	}
	var later []model.PodGroup
	for i := range rapid.IntRange(0, 6).Draw(t, "later") {
		later = append(later, group(i, "h", int64(100+i)))
	}
	return snap, later
}

// checkInvariants fails t if snap over-allocates anything, runs a pod on
// a node it cannot use or has a queue above its limit.
func checkInvariants(t *rapid.T, snap *model.Snapshot) {
	for a := range snap.AllRunning() {
		if a.Request.MIGSlices > 0 && (len(a.GPUs) != 1 || a.GPUs[0].MIGSlices != a.Request.MIGSlices) {
			t.Fatalf("pod %s asked for a %d-slice MIG instance, got %+v", a.Pod, a.Request.MIGSlices, a.GPUs)
		}
	}
	checkCapacity(t, snap.Nodes, snap.AllRunning(), "")
	tree, err := queue.New(snap.Queues)
	if err != nil {
		t.Fatal(err)
	}
	for a := range snap.AllRunning() {
		tree.AddUsage(tree.Leaf(a.Queue), a.Request.Resources())
	}
	for i := range tree.Len() {
		if !tree.Admits(i, model.Resources{}) {
			t.Fatalf("queue %s above its limit: usage %+v", tree.Name(i), tree.Usage(i))
		}
	}
}

// checkCapacity fails t if the allocations over-allocate a node of nodes
// or run a pod on a node it cannot use; when names what they are.
func checkCapacity(t *rapid.T, nodes []model.Node, allocs iter.Seq[*model.Allocation], when string) {
	type key struct {
		node string
		gpu  int
	}
	cpu := map[string]int64{}
	gpuUse := map[key]int64{}
	migSlices := map[key]int{}
	byName := map[string]*model.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	for a := range allocs {
		if !placement.StaticFits(byName[a.Node], &a.Request) {
			t.Fatalf("pod %s runs on %s%s, which its selector, tolerations or GPU kind rule out", a.Pod, a.Node, when)
		}
		cpu[a.Node] += a.Request.MilliCPU
		for _, sh := range a.GPUs {
			gpuUse[key{a.Node, sh.Index}] += sh.Milli
			migSlices[key{a.Node, sh.Index}] += sh.MIGSlices
		}
	}
	for _, n := range nodes {
		if cpu[n.Name] > n.MilliCPU {
			t.Fatalf("node %s: %d milli-CPU allocated of %d%s", n.Name, cpu[n.Name], n.MilliCPU, when)
		}
		for _, g := range n.GPUs {
			if u := gpuUse[key{n.Name, g.Index}]; u > g.Capacity() {
				t.Fatalf("node %s GPU %d: %d milli allocated of %d%s", n.Name, g.Index, u, g.Capacity(), when)
			}
			if u := migSlices[key{n.Name, g.Index}]; u > g.MIGSlices || (u > 0 && gpuUse[key{n.Name, g.Index}] > 0) {
				t.Fatalf("node %s GPU %d: %d MIG slices of %d, %d milli shared beside them%s", n.Name, g.Index, u, g.MIGSlices, gpuUse[key{n.Name, g.Index}], when)
			}
		}
	}
}

// checkDecisions fails t if d places part of a gang, splits a group's
// binds, evicts for a group it did not place, preempts what it may not,
// evicts a victim with nothing on a node the preemptor could use, or
// exceeds the disruption budget.
func checkDecisions(t *rapid.T, before *model.Snapshot, d model.Decisions) {
	groups := map[string]*model.PodGroup{}
	for i := range before.Pending {
		groups[before.Pending[i].Name] = &before.Pending[i]
	}
	count := map[string]int{}
	for i, b := range d.Binds {
		if count[b.Group] > 0 && d.Binds[i-1].Group != b.Group {
			t.Fatalf("binds of group %s are not adjacent", b.Group)
		}
		count[b.Group]++
	}
	for name, n := range count {
		if g := groups[name]; g == nil || n < g.Min() {
			t.Fatalf("group %s partially placed: %d pods bound", name, n)
		}
	}
	// A pod evicted in this cycle still holds its room until it exits:
	// a bind goes only where it fits beside every pod running before the
	// cycle, those evicted in it included.
	bound := func(yield func(*model.Allocation) bool) {
		for a := range before.AllRunning() {
			if !yield(a) {
				return
			}
		}
		for _, b := range d.Binds {
			g := groups[b.Group]
			k := slices.IndexFunc(g.Pods, func(p model.Pod) bool { return p.Name == b.Pod })
			if k < 0 {
				t.Fatalf("bind of %s, not a pod of group %s", b.Pod, b.Group)
			}
			if !yield(&model.Allocation{Pod: b.Pod, Group: b.Group, Node: b.Node, Request: *g.Pods[k].Request.Alt(b.Alternative), GPUs: b.GPUs}) {
				return
			}
		}
	}
	checkCapacity(t, before.Nodes, iter.Seq[*model.Allocation](bound), " beside the pods evicted in the cycle")
	prio := map[string]int32{}
	queueOf := map[string]string{}
	allocs := map[string][]*model.Allocation{}
	for a := range before.AllRunning() {
		prio[a.Pod], queueOf[a.Pod] = a.Priority, a.Queue
		allocs[a.Group] = append(allocs[a.Group], a)
	}
	nodes := map[string]*model.Node{}
	for i := range before.Nodes {
		nodes[before.Nodes[i].Name] = &before.Nodes[i]
	}
	// usable reports whether a pod of g could ever run where a holds
	// resources.
	usable := func(g *model.PodGroup, a *model.Allocation) bool {
		for _, p := range g.Pods {
			if placement.StaticFits(nodes[a.Node], &p.Request) {
				return true
			}
		}
		return false
	}
	holds := map[string]model.Hold{}
	for _, h := range d.Holds {
		if h.Moved {
			checkMoved(t, before, allocs[h.Group], h, d)
			holds[h.Group] = h
			continue
		}
		if g := groups[h.Group]; g == nil || len(h.Plan) < g.Min() || count[h.Group] > 0 {
			t.Fatalf("hold %+v: a plan of at least the gang's size for a pending group not bound", h)
		}
		holds[h.Group] = h
	}
	// A move ahead of a drain is made for a group that waits with a node
	// kept for it, where a pod of the moved group stood: ahead names the
	// moved groups, each with the group it was moved for.
	keptFor := map[string]string{}
	for _, u := range d.Unplaced {
		for _, k := range u.Kept {
			keptFor[k.Node] = u.Group
		}
	}
	ahead := map[string]string{}
	for _, e := range d.Evictions {
		if e.Reason == model.EvictDefragment && keptFor[e.Node] == e.For {
			ahead[e.Group] = e.For
		}
	}
	evicted := map[string]bool{}
	for _, e := range d.Evictions {
		g := groups[e.For]
		if _, held := holds[e.For]; g == nil || !held && ahead[e.Group] != e.For {
			t.Fatalf("eviction of %s for %s, which does not wait for it", e.Pod, e.For)
		}
		if e.Reason == "preempt" && (prio[e.Pod] >= g.Priority || queueOf[e.Pod] != g.Queue) {
			t.Fatalf("preempted %s (priority %d, queue %q) for %s (priority %d, queue %q)", e.Pod, prio[e.Pod], queueOf[e.Pod], g.Name, g.Priority, g.Queue)
		}
		if !slices.ContainsFunc(allocs[e.Group], func(a *model.Allocation) bool { return usable(g, a) }) {
			t.Fatalf("evicted group %s for %s, though no pod of %s can use its nodes", e.Group, g.Name, g.Name)
		}
		if young(before, allocs[e.Group]) {
			t.Fatalf("evicted group %s for %s before its minimum runtime", e.Group, g.Name)
		}
		if h, ok := holds[e.Group]; e.Reason == model.EvictDefragment && (!ok || !h.Moved) {
			t.Fatalf("%s evicted to defragment, but its group %s is not held where it moves", e.Pod, e.Group)
		}
		evicted[e.Pod] = true
	}
	// An elastic group shrinks no lower than its minimum; a group either
	// shrinks or goes whole.
	gone := map[string]int{}
	for _, e := range d.Evictions {
		gone[e.Group]++
	}
	for _, e := range d.Evictions {
		as := allocs[e.Group]
		if e.Shrink && (as[0].MinMember <= 0 || len(as)-gone[e.Group] < as[0].MinMember) {
			t.Fatalf("group %s of %d pods (minMember %d) shrunk by %d", e.Group, len(as), as[0].MinMember, gone[e.Group])
		}
		if !e.Shrink && gone[e.Group] != len(as) {
			t.Fatalf("group %s of %d pods evicted by %d, not whole", e.Group, len(as), gone[e.Group])
		}
	}
	if b := before.Budget.MaxEvictions; b >= 0 && len(evicted) > b {
		t.Fatalf("%d evictions with a budget of %d", len(evicted), b)
	}
}

// young reports whether the running group of allocs has run less than
// its minimum runtime at snap.Now: its pods' (their priority class's) or
// that of its queue or any queue above, the largest.
func young(snap *model.Snapshot, allocs []*model.Allocation) bool {
	spec := map[string]model.Queue{}
	for _, q := range snap.Queues {
		spec[q.Name] = q
	}
	var started, least int64
	for _, a := range allocs {
		started, least = max(started, a.StartedAt), max(least, a.MinRuntime)
		name := a.Queue
		if _, ok := spec[name]; !ok {
			name = queue.DefaultQueue
		}
		for seen := 0; name != "" && seen < len(spec); seen++ {
			least = max(least, spec[name].MinRuntime)
			name = spec[name].Parent
		}
	}
	return least > 0 && snap.Now-started < least
}

// checkMoved fails t unless the moved hold h is the whole group whose
// running pods are ran, each evicted to defragment, placed again for them
// and not moved beyond the snapshot's DefragPolicy.
func checkMoved(t *rapid.T, before *model.Snapshot, ran []*model.Allocation, h model.Hold, d model.Decisions) {
	if len(ran) == 0 || len(h.Plan) != len(ran) || len(h.Victims) != len(ran) {
		t.Fatalf("moved hold %+v for a group running %d pods", h, len(ran))
	}
	for _, a := range ran {
		if !slices.Contains(h.Victims, a.Pod) || !slices.ContainsFunc(h.Plan, func(b model.Bind) bool { return b.Pod == a.Pod }) ||
			!slices.ContainsFunc(d.Evictions, func(e model.Eviction) bool { return e.Pod == a.Pod && e.Reason == model.EvictDefragment }) {
			t.Fatalf("moved hold %+v: pod %s not evicted and placed again", h, a.Pod)
		}
		if !a.Movable {
			t.Fatalf("moved %s, which did not opt in", a.Pod)
		}
	}
	if left := before.Defrag.Left(before.Now); len(d.Moves) > left {
		t.Fatalf("%d moves with %d left in the window", len(d.Moves), left)
	}
	for _, m := range before.Defrag.Recent {
		if before.Now-m.At < before.Defrag.Window && m.Group == h.Group {
			t.Fatalf("%s moved again within the window (last at %d, now %d)", h.Group, m.At, before.Now)
		}
	}
}

// propertyStep runs one cycle of h a time step after the last, checks
// its decisions and the snapshot they leave, and that every hold of the
// cycle before is bound where its plan said (the harness carries
// evictions out at once).
func propertyStep(t *rapid.T, h *schedtest.Harness) model.Decisions {
	h.Snap.Now += 10 // stepNow: moves of a window of 1 leave it by the next cycle
	before := h.Snap // model.Apply writes nothing it was given: before keeps its view
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	checkDecisions(t, &before, d)
	checkInvariants(t, &h.Snap)
	// A node kept free is kept for its cycle only: none stays closed to
	// the next.
	st := scheduler.StateOf(h.Sched)
	for i := range st.Nodes {
		if st.Closed(i) {
			t.Fatalf("node %s is still closed after the cycle", st.Nodes[i].Node.Name)
		}
	}
	// Nothing goes to a node that has yet to register its GPUs, and a
	// group that waits for such nodes names only such nodes.
	coming := map[string]bool{}
	for _, n := range before.Nodes {
		coming[n.Name] = n.Coming
	}
	for _, b := range schedtest.Planned(&d) {
		if coming[b.Node] {
			t.Fatalf("%s placed on %s, which has yet to register its GPUs", b.Pod, b.Node)
		}
	}
	for _, u := range d.Unplaced {
		if (u.Code == model.UnplacedNodesComing) != (len(u.Coming) > 0) {
			t.Fatalf("group %s waits (%s) for coming nodes %v", u.Group, u.Code, u.Coming)
		}
		for _, n := range u.Coming {
			if !coming[n] {
				t.Fatalf("group %s waits for %s, which is up", u.Group, n)
			}
		}
	}
	// The victims left at once: every hold of the cycle before
	// is bound now, where its plan said.
	for _, hd := range before.Holds {
		got := 0
		for _, b := range d.Binds {
			if b.Group == hd.Group {
				if !slices.ContainsFunc(hd.Plan, func(p model.Bind) bool {
					return p.Pod == b.Pod && p.Node == b.Node && reflect.DeepEqual(p.GPUs, b.GPUs)
				}) {
					t.Fatalf("held group %s bound %s on %s %+v, off its plan %+v", hd.Group, b.Pod, b.Node, b.GPUs, hd.Plan)
				}
				got++
			}
		}
		if got != len(hd.Plan) {
			t.Fatalf("held group %s bound %d of its plan's %d pods", hd.Group, got, len(hd.Plan))
		}
	}
	return d
}

func TestPropertyInvariantsAndFixedPoint(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, later := genWorkload(t)
		h, err := schedtest.NewHarness(snap, scheduler.Config{Policy: rapid.SampledFrom([]string{"gpuplane", "fgd", "bestfit"}).Draw(t, "policy")})
		if err != nil {
			t.Fatal(err)
		}
		step := func() model.Decisions { return propertyStep(t, h) }
		step()
		// Some running pods report a checkpoint (a new chunk per node, as
		// a driver gives a node that changed).
		run := schedtest.Running(&h.Snap)
		for i := range run {
			run[i].LastCheckpoint = rapid.SampledFrom([]int64{0, 0, 1, 4}).Draw(t, "checkpoint")
		}
		h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, run...)
		h.Snap.Pending = append(h.Snap.Pending, later...)
		// Nothing departs, so repeated cycles must settle: no evictions
		// and no binds, within a bound on the number of cycles.
		for i := 0; ; i++ {
			d := step()
			if len(d.Evictions) == 0 && len(d.Binds) == 0 && len(d.Holds) == 0 {
				break
			}
			if i > 60 {
				t.Fatalf("no fixed point after %d cycles: last %d binds, %d evictions", i, len(d.Binds), len(d.Evictions))
			}
		}
	})
}

func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, later := genWorkload(t)
		snap.Pending = append(snap.Pending, later...)
		run := func() model.Decisions {
			d := cycleOnce(t, &snap)
			d.Timings = nil
			return d
		}
		if a, b := run(), run(); !reflect.DeepEqual(a, b) {
			t.Fatalf("same snapshot, different decisions:\n%+v\n%+v", a, b)
		}
	})
}
