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

// poolNode is a node reserved for pods that select pool=batch and tolerate
// its pool=batch taint.
func poolNode(name string, gpus int) model.Node {
	return schedtest.Node(name, 128000, 1<<20).GPUs(gpus, "A100").Label("pool", "batch").Taint("pool", "batch", "NoSchedule").Obj()
}

func inPool(req model.Request) model.Request { return schedtest.Confined(req, "pool", "batch") }

// groupsOf returns the sorted distinct groups of evictions and of
// placements, bound or held for their victims.
func groupsOf(d model.Decisions) (evicted, bound []string) {
	for _, e := range d.Evictions {
		evicted = append(evicted, e.Group)
	}
	for _, b := range schedtest.Planned(&d) {
		bound = append(bound, b.Group)
	}
	slices.Sort(evicted)
	slices.Sort(bound)
	return slices.Compact(evicted), slices.Compact(bound)
}

// evictionCase runs first on an empty cluster, then adds arrive; the
// second cycle's decisions are checked, and a third cycle on the result
// must neither fail (the binds fit beside what still runs) nor evict.
type evictionCase struct {
	name          string
	nodes         []model.Node
	queues        []model.Queue
	first, arrive []model.PodGroup
	budget        int
	wantEvicted   []string
	wantBound     []string
	// wantNode, when set, is the only node evictions and binds may name.
	wantNode string
}

func runEvictionCase(t *testing.T, tc evictionCase) model.Decisions {
	t.Helper()
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: tc.nodes, Queues: tc.queues, Pending: tc.first, Budget: model.DisruptionBudget{MaxEvictions: tc.budget}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	running(h, t)
	if len(h.Snap.Pending) != 0 {
		t.Fatalf("setup left groups pending: %+v", h.Snap.Pending)
	}
	h.Snap.Pending = append(h.Snap.Pending, tc.arrive...)
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	evicted, bound := groupsOf(d)
	if !slices.Equal(evicted, tc.wantEvicted) || !slices.Equal(bound, tc.wantBound) {
		t.Fatalf("evicted %v and bound %v, want %v and %v (evictions %+v)", evicted, bound, tc.wantEvicted, tc.wantBound, d.Evictions)
	}
	if tc.wantNode != "" {
		for _, e := range d.Evictions {
			if e.Node != tc.wantNode {
				t.Fatalf("evicted %s on %s, want only %s", e.Pod, e.Node, tc.wantNode)
			}
		}
		for _, b := range schedtest.Planned(&d) {
			if b.Node != tc.wantNode {
				t.Fatalf("bound %s on %s, want only %s", b.Pod, b.Node, tc.wantNode)
			}
		}
	}
	again, err := h.Cycle()
	if err != nil {
		t.Fatalf("cycle after the evictions: %v", err)
	}
	if len(again.Evictions) != 0 {
		t.Fatalf("the next cycle evicts again: %+v", again.Evictions)
	}
	// The victims are gone (the harness carries evictions out at once):
	// the next cycle binds every held plan as it was made.
	var held []model.Bind
	for _, hd := range d.Holds {
		held = append(held, hd.Plan...)
	}
	if len(held) > 0 && (len(again.Holds) != 0 || !reflect.DeepEqual(again.Binds[:min(len(held), len(again.Binds))], held)) {
		t.Fatalf("the next cycle binds %+v and holds %+v, want the held plans %+v", again.Binds, again.Holds, held)
	}
	return d
}

func TestEvictionsSpareUselessVictims(t *testing.T) {
	a := []model.Queue{{Name: "a"}}
	g := func(name string, prio int32, pods int, req model.Request) model.PodGroup {
		return schedtest.Group(name).Queue("a").Priority(prio).Pods(pods, req).Obj()
	}
	tests := []evictionCase{
		{
			name: "victim on a node the preemptor's selector and taint rule out",
			// low runs off the pool (it cannot tolerate the taint) and is
			// the cheaper victim, but only mid's room helps high.
			nodes:       []model.Node{poolNode("pool", 2), schedtest.Node("free", 128000, 1<<20).GPUs(2, "A100").Obj()},
			queues:      a,
			first:       []model.PodGroup{g("low", 1, 1, schedtest.GPU(2, 1000)), g("mid", 2, 1, inPool(schedtest.GPU(2, 1000)))},
			arrive:      []model.PodGroup{g("high", 5, 1, inPool(schedtest.GPU(2, 1000)))},
			budget:      -1,
			wantEvicted: []string{"mid"},
			wantBound:   []string{"high"},
			wantNode:    "pool",
		},
		{
			name: "useless victim would use up the disruption budget",
			// The budget allows one pod: low's would leave none for mid's.
			nodes:       []model.Node{poolNode("pool", 2), schedtest.Node("free", 128000, 1<<20).GPUs(2, "A100").Obj()},
			queues:      a,
			first:       []model.PodGroup{g("low", 1, 1, schedtest.GPU(2, 1000)), g("mid", 2, 1, inPool(schedtest.GPU(2, 1000)))},
			arrive:      []model.PodGroup{g("high", 5, 1, inPool(schedtest.GPU(2, 1000)))},
			budget:      1,
			wantEvicted: []string{"mid"},
			wantBound:   []string{"high"},
			wantNode:    "pool",
		},
		{
			name:        "victim on MIG GPUs when the preemptor wants whole GPUs",
			nodes:       []model.Node{schedtest.Node("mig", 128000, 1<<20).MIG(2, 7, "A100").Obj(), schedtest.Node("whole", 128000, 1<<20).GPUs(2, "A100").Obj()},
			queues:      a,
			first:       []model.PodGroup{g("low", 1, 2, model.Request{MIGSlices: 7, MilliCPU: 1000}), g("mid", 2, 1, schedtest.GPU(2, 1000))},
			arrive:      []model.PodGroup{g("high", 5, 1, schedtest.GPU(2, 1000))},
			budget:      -1,
			wantEvicted: []string{"mid"},
			wantBound:   []string{"high"},
			wantNode:    "whole",
		},
		{
			name:   "victim on a GPU model the preemptor excludes",
			nodes:  []model.Node{schedtest.Node("v100", 128000, 1<<20).GPUs(2, "V100").Obj(), schedtest.Node("a100", 128000, 1<<20).GPUs(2, "A100").Obj()},
			queues: a,
			first: []model.PodGroup{g("low", 1, 1, model.Request{GPUs: 2, GPUModels: []string{"V100"}}),
				g("mid", 2, 1, model.Request{GPUs: 2, GPUModels: []string{"A100"}})},
			arrive:      []model.PodGroup{g("high", 5, 1, model.Request{GPUs: 2, GPUModels: []string{"A100"}})},
			budget:      -1,
			wantEvicted: []string{"mid"},
			wantBound:   []string{"high"},
			wantNode:    "a100",
		},
		{
			name: "cheaper victim reprieved once a larger one made room",
			// low is taken first, but mid alone frees the two GPUs.
			nodes:       schedtest.Cluster("n", 1, 4, 128000, 1<<20),
			queues:      a,
			first:       []model.PodGroup{g("low", 1, 1, schedtest.GPU(1, 1000)), g("mid", 2, 1, schedtest.GPU(2, 1000)), g("top", 3, 1, schedtest.GPU(1, 1000))},
			arrive:      []model.PodGroup{g("high", 5, 1, schedtest.GPU(2, 1000))},
			budget:      -1,
			wantEvicted: []string{"mid"},
			wantBound:   []string{"high"},
		},
		{
			name: "room left by an earlier preemption needs no victim",
			// high1 evicts a 2-GPU victim for 1 GPU; high2 waits for the
			// same victim in the rest (held, not bound while it runs).
			nodes:       schedtest.Cluster("n", 1, 4, 128000, 1<<20),
			queues:      a,
			first:       []model.PodGroup{g("low1", 1, 1, schedtest.GPU(2, 1000)), g("low2", 1, 1, schedtest.GPU(2, 1000))},
			arrive:      []model.PodGroup{g("high1", 5, 1, schedtest.GPU(1, 1000)), g("high2", 5, 1, schedtest.GPU(1, 1000))},
			budget:      -1,
			wantEvicted: []string{"low1"},
			wantBound:   []string{"high1", "high2"},
		},
		{
			name: "fair-share reclaim skips borrowed GPUs the reclaimer cannot use",
			// b borrows a's guarantee on both nodes; a's gang can only
			// use the pool, and b may give up only two pods.
			nodes: []model.Node{poolNode("pool", 2), schedtest.Node("free", 128000, 1<<20).GPUs(2, "A100").Obj()},
			queues: []model.Queue{{Name: "org"}, {Name: "a", Parent: "org", Guaranteed: model.Resources{GPUMilli: 2000}},
				{Name: "b", Parent: "org", Guaranteed: model.Resources{GPUMilli: 2000}}},
			first: []model.PodGroup{
				schedtest.Group("b1").Queue("b").Pods(1, schedtest.GPU(1, 1000)).Obj(), schedtest.Group("b2").Queue("b").Pods(1, schedtest.GPU(1, 1000)).Obj(),
				schedtest.Group("b3").Queue("b").Pods(1, inPool(schedtest.GPU(1, 1000))).Obj(), schedtest.Group("b4").Queue("b").Pods(1, inPool(schedtest.GPU(1, 1000))).Obj()},
			arrive:      []model.PodGroup{schedtest.Group("a1").Queue("a").Pods(2, inPool(schedtest.GPU(1, 1000))).Obj()},
			budget:      -1,
			wantEvicted: []string{"b3", "b4"},
			wantBound:   []string{"a1"},
			wantNode:    "pool",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := runEvictionCase(t, tc)
			for _, e := range d.Evictions {
				if e.Reason == "" || e.For == "" {
					t.Fatalf("eviction %+v lacks a reason or a beneficiary", e)
				}
			}
		})
	}
}

func TestGuaranteeReclaim(t *testing.T) {
	queues := func(guarA, guarB int64) []model.Queue {
		return []model.Queue{{Name: "org"},
			{Name: "a", Parent: "org", Guaranteed: model.Resources{GPUMilli: guarA}},
			{Name: "b", Parent: "org", Guaranteed: model.Resources{GPUMilli: guarB}}}
	}
	// b runs 8 single-GPU pods in the 8-GPU pool, all started at once (so
	// victims go by name); the other node is idle.
	var bPods []model.PodGroup
	for i := range 8 {
		bPods = append(bPods, schedtest.Group("b"+string(rune('0'+i))).Queue("b").Created(int64(i)).Pods(1, inPool(schedtest.GPU(1, 1000))).Obj())
	}
	split := []model.Node{poolNode("pool", 8), schedtest.Node("free", 128000, 1<<20).GPUs(8, "A100").Obj()}
	gang := func(size int) []model.PodGroup {
		return []model.PodGroup{schedtest.Group("a1").Queue("a").Created(100).Pods(size, inPool(schedtest.GPU(1, 1000))).Obj()}
	}
	tests := []struct {
		evictionCase
		wantPods int
	}{
		{
			evictionCase: evictionCase{name: "gang within its guarantee reclaims in the pool", nodes: split, queues: queues(4000, 4000),
				first: bPods, arrive: gang(4), budget: -1, wantEvicted: []string{"b0", "b1", "b2", "b3"}, wantBound: []string{"a1"}, wantNode: "pool"},
			wantPods: 4,
		},
		{
			evictionCase: evictionCase{name: "gang above its guarantee does not reclaim", nodes: split, queues: queues(4000, 4000),
				first: bPods, arrive: gang(5), budget: -1},
		},
		{
			evictionCase: evictionCase{name: "victim's queue would drop below its guarantee", nodes: split, queues: queues(4000, 6000),
				first: bPods, arrive: gang(4), budget: -1},
		},
		{
			evictionCase: evictionCase{name: "disruption budget too small", nodes: split, queues: queues(4000, 4000),
				first: bPods, arrive: gang(4), budget: 3},
		},
		{
			// Without the idle node GPUs are scarce: the fair-share rule
			// reclaims the same pods and the guarantee rule is not needed.
			evictionCase: evictionCase{name: "scarce GPUs reclaim by fair share", nodes: split[:1], queues: queues(4000, 4000),
				first: bPods, arrive: gang(4), budget: -1, wantEvicted: []string{"b0", "b1", "b2", "b3"}, wantBound: []string{"a1"}, wantNode: "pool"},
			wantPods: 4,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := runEvictionCase(t, tc.evictionCase)
			if planned := schedtest.Planned(&d); len(d.Evictions) != tc.wantPods || len(planned) != tc.wantPods {
				t.Fatalf("%d evictions and %d placements, want %d of each", len(d.Evictions), len(planned), tc.wantPods)
			}
			for _, e := range d.Evictions {
				if e.Reason != "reclaim" || e.For != "a1" {
					t.Fatalf("eviction %+v, want a reclaim for a1", e)
				}
			}
		})
	}
}

// TestQueuePolicyForbidsEvictions: a queue whose policy forbids preemption
// or reclaim evicts nothing for its groups; the core says why the group
// waits, naming the queue, so no driver has to veto or explain it.
func TestQueuePolicyForbidsEvictions(t *testing.T) {
	node := []model.Node{schedtest.Node("n", 128000, 1<<20).GPUs(8, "A100").Obj()}
	var fill []model.PodGroup
	for i := range 8 {
		fill = append(fill, schedtest.Group("low"+string(rune('0'+i))).Queue("a").Created(int64(i)).Pods(1, schedtest.GPU(1, 1000)).Obj())
	}
	urgent := []model.PodGroup{schedtest.Group("urgent").Queue("a").Priority(100).Created(100).Pods(1, schedtest.GPU(1, 1000)).Obj()}
	var borrowers []model.PodGroup
	for i := range 8 {
		borrowers = append(borrowers, schedtest.Group("b"+string(rune('0'+i))).Queue("b").Created(int64(i)).Pods(1, schedtest.GPU(1, 1000)).Obj())
	}
	reclaimer := []model.PodGroup{schedtest.Group("a1").Queue("a").Created(100).Pods(4, schedtest.GPU(1, 1000)).Obj()}
	neverEvicts := func(gs []model.PodGroup) []model.PodGroup {
		out := slices.Clone(gs)
		for i := range out {
			out[i].NeverEvicts = true
		}
		return out
	}
	twoQueues := func(noReclaim bool) []model.Queue {
		return []model.Queue{{Name: "org"},
			{Name: "a", Parent: "org", Guaranteed: model.Resources{GPUMilli: 4000}, NoReclaim: noReclaim},
			{Name: "b", Parent: "org", Guaranteed: model.Resources{GPUMilli: 4000}}}
	}
	tests := []struct {
		name       string
		queues     []model.Queue
		first      []model.PodGroup
		arrive     []model.PodGroup
		wantEvicts bool
		wantCode   string
		wantReason string
	}{
		{name: "preemption allowed", queues: []model.Queue{{Name: "a"}}, first: fill, arrive: urgent, wantEvicts: true},
		{name: "preemption Never", queues: []model.Queue{{Name: "a", NoPreemption: true}}, first: fill, arrive: urgent,
			wantCode: model.UnplacedPreemptionDisabled, wantReason: `queue "a" has spec.preemption: Never`},
		{name: "a pod's preemptionPolicy Never", queues: []model.Queue{{Name: "a"}}, first: fill, arrive: neverEvicts(urgent),
			wantCode: model.UnplacedPreemptionDisabled, wantReason: "preemptionPolicy: Never"},
		{name: "reclaim allowed", queues: twoQueues(false), first: borrowers, arrive: reclaimer, wantEvicts: true},
		{name: "a reclaimer's preemptionPolicy Never", queues: twoQueues(false), first: borrowers, arrive: neverEvicts(reclaimer),
			wantCode: model.UnplacedReclaimDisabled, wantReason: "preemptionPolicy: Never"},
		{name: "reclaim Never", queues: twoQueues(true), first: borrowers, arrive: reclaimer,
			wantCode: model.UnplacedReclaimDisabled, wantReason: `queue "a" has spec.reclaim: Never`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: node, Queues: tt.queues, Pending: tt.first, Budget: model.DisruptionBudget{MaxEvictions: -1}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			running(h, t)
			h.Snap.Pending = append(h.Snap.Pending, tt.arrive...)
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			if (len(d.Evictions) > 0) != tt.wantEvicts {
				t.Fatalf("evictions %+v, want some: %v", d.Evictions, tt.wantEvicts)
			}
			if tt.wantCode == "" {
				return
			}
			if len(d.Unplaced) != 1 || d.Unplaced[0].Code != tt.wantCode || !strings.Contains(d.Unplaced[0].Reason, tt.wantReason) {
				t.Fatalf("unplaced %+v, want %s saying %q", d.Unplaced, tt.wantCode, tt.wantReason)
			}
		})
	}
}

// TestVictimOrderFollowsAGroupBetweenQueues: a running group whose queue
// changes (its members relabelled) and changes back is listed once among
// its queue's victims, however many queues sorted it in between; each of
// its pods is evicted once.
func TestVictimOrderFollowsAGroupBetweenQueues(t *testing.T) {
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name, group, queue string, cpu int64) model.Allocation {
		return model.Allocation{Pod: name, Group: group, Queue: queue, Node: "n", Request: model.Request{MilliCPU: cpu}}
	}
	other := pod("other", "other", "a", 4000)
	other.NonPreemptible = true
	h := pod("h0", "h", "a", 2000)
	h.Priority = 1
	running := []model.Allocation{other, pod("p0", "g", "a", 2000), pod("p1", "g", "a", 2000), h}
	snap := model.Snapshot{
		Nodes: []model.Node{schedtest.Node("n", 10000, 1<<20).Obj()},
		// a's weight keeps b from reclaiming from it, which would read
		// (and tidy) a's victims in the second cycle.
		Queues: []model.Queue{{Name: "a", Weight: 10}, {Name: "b"}},
		Budget: model.DisruptionBudget{MaxEvictions: -1},
	}
	cycle := func(pending model.PodGroup) model.Decisions {
		t.Helper()
		snap.Pending = []model.PodGroup{pending}
		snap.RunningByNode = schedtest.OnNodes(snap.Nodes, running...)
		d, err := s.Cycle(&snap)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Each queue's victims are looked at by a group that would not fit
	// even by evicting g.
	if d := cycle(schedtest.Group("big-a").Queue("a").Priority(5).Pods(1, model.Request{MilliCPU: 7000}).Obj()); len(d.Evictions) != 0 {
		t.Fatalf("evictions %+v, want none: big-a does not fit by evicting g", d.Evictions)
	}
	running[1].Queue = "b"
	if d := cycle(schedtest.Group("big-b").Queue("b").Priority(5).Pods(1, model.Request{MilliCPU: 7000}).Obj()); len(d.Evictions) != 0 {
		t.Fatalf("evictions %+v, want none: big-b does not fit by evicting g", d.Evictions)
	}
	running[1].Queue = "a"
	// fits-a needs g's room and h's.
	d := cycle(schedtest.Group("fits-a").Queue("a").Priority(5).Pods(1, model.Request{MilliCPU: 6000}).Obj())
	var evicted []string
	for _, e := range d.Evictions {
		evicted = append(evicted, e.Pod)
	}
	slices.Sort(evicted)
	if !slices.Equal(evicted, []string{"h0", "p0", "p1"}) {
		t.Fatalf("evicted %v, want h0, p0 and p1 once each", evicted)
	}
}

// exitingCase is one 8-GPU node where low0 runs on GPUs 0-3 and low1,
// being deleted, on 4-7, and urgent, of priority prio, waits for 2 GPUs;
// evictions are unbounded. It returns the harness after one cycle, its
// decisions and the running pods.
func exitingCase(t *testing.T, prio int32, holdTimeout int64) (*schedtest.Harness, model.Decisions, []model.Allocation) {
	t.Helper()
	nodes := schedtest.Cluster("n", 1, 8, 128000, 1<<20)
	run := withIndexes(runningGroup("low0", "a", "n-0", 0, 4, 0, 0, 0), runningGroup("low1", "a", "n-0", 0, 4, 1, 0, 0))
	run[1].Request.Terminating, run[1].NonPreemptible = true, true
	h, d := harnessCycle(t, model.Snapshot{Nodes: nodes, Queues: []model.Queue{{Name: "a"}}, RunningByNode: schedtest.OnNodes(nodes, run...),
		Budget: model.DisruptionBudget{MaxEvictions: -1}, HoldTimeout: holdTimeout,
		Pending: []model.PodGroup{schedtest.Group("urgent").Queue("a").Priority(prio).Pods(1, schedtest.GPU(2, 1000)).Obj()}}, scheduler.Config{})
	return h, d, run
}

// A group that fits only in the room of a pod being deleted waits for it
// (a hold naming it) rather than evicting another pod while it exits,
// whether or not it could evict at all; the pod keeps its room until it
// is gone, and the group binds where it waited once it is.
func TestGroupWaitsForAPodAlreadyExiting(t *testing.T) {
	for _, prio := range []int32{5, 0} {
		t.Run(fmt.Sprintf("priority %d", prio), func(t *testing.T) {
			h, d, run := exitingCase(t, prio, 0)
			if len(d.Evictions) != 0 || len(d.Binds) != 0 || len(d.Holds) != 1 || !slices.Equal(d.Holds[0].Victims, []string{"low1-0"}) {
				t.Fatalf("evicted %+v, bound %+v, held %+v; want urgent held for low1-0 alone", d.Evictions, d.Binds, d.Holds)
			}
			plan := d.Holds[0].Plan
			for _, sh := range plan[0].GPUs {
				if sh.Index < 4 {
					t.Fatalf("urgent planned on GPU %d, held by low0", sh.Index)
				}
			}
			// low1 still runs: the next cycle keeps waiting; then it goes.
			d, err := h.Cycle()
			if err != nil || len(d.Binds) != 0 || len(d.Evictions) != 0 {
				t.Fatalf("while low1 exits: binds %+v, evictions %+v (%v)", d.Binds, d.Evictions, err)
			}
			h.Snap.RunningByNode = schedtest.OnNodes(h.Snap.Nodes, run[0])
			if d, err = h.Cycle(); err != nil || len(d.Binds) != 1 || !reflect.DeepEqual(d.Binds[0].GPUs, plan[0].GPUs) {
				t.Fatalf("after low1 went: binds %+v, want urgent on its plan %+v (%v)", d.Binds, plan, err)
			}
		})
	}
}

// A pod may take long to go: a group that waited for one through its
// hold's timeout competes afresh and may evict to make room, as it would
// have without the pod being deleted.
func TestWaitForAnExitingPodEndsWithTheHoldTimeout(t *testing.T) {
	h, d, _ := exitingCase(t, 5, 60)
	if len(d.Evictions) != 0 || len(d.Holds) != 1 {
		t.Fatalf("first cycle: evictions %+v, holds %+v; want urgent held for low1", d.Evictions, d.Holds)
	}
	h.Snap.Now += 60
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if got := evictedGroups(d); !slices.Equal(got, []string{"low0"}) || len(d.Holds) != 1 || !slices.Equal(d.Holds[0].Victims, []string{"low0-0"}) {
		t.Fatalf("past the timeout: evicted %v, holds %+v; want low0 evicted for urgent", got, d.Holds)
	}
}
