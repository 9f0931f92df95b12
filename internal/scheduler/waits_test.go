package scheduler_test

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// Every group the core leaves waiting says what it waits for, and only
// the groups that more nodes would start say capacity: a driver keeps the
// others from autoscalers, which would buy nodes that stay idle.
func TestUnplacedWaits(t *testing.T) {
	gpus := func(n int64) model.Resources { return model.Resources{GPUMilli: n * model.MilliPerGPU} }
	// One node of 4 GPUs.
	nodes := schedtest.Cluster("n", 1, 4, 64000, 1<<20)
	capped := []model.Queue{{Name: "a", Limit: gpus(2)}}
	tests := []struct {
		name   string
		queues []model.Queue
		// first runs alone, then arrive joins it; the last cycle's
		// entry for group "w" is checked.
		first, arrive []model.PodGroup
		budget        int
		wantCode      string
		wantWait      string
		wantMissing   int
	}{
		{name: "no node has room: capacity",
			arrive:   []model.PodGroup{schedtest.Group("w").Pods(1, schedtest.GPU(5, 0)).Obj()},
			wantCode: model.UnplacedNoFit, wantWait: model.WaitCapacity},
		{name: "a gang above all nodes together: capacity, which added nodes would give",
			arrive:   []model.PodGroup{schedtest.Group("w").MinMember(2).Pods(2, schedtest.GPU(4, 0)).Obj()},
			wantCode: model.UnplacedAboveCapacity, wantWait: model.WaitCapacity},
		{name: "its queue is at its limit: quota",
			queues:   capped,
			first:    []model.PodGroup{schedtest.Group("old").Queue("a").Pods(1, schedtest.GPU(2, 0)).Obj()},
			arrive:   []model.PodGroup{schedtest.Group("w").Queue("a").Pods(1, schedtest.GPU(1, 0)).Obj()},
			wantCode: model.UnplacedQueueLimit, wantWait: model.WaitQuota},
		{name: "above its queue's limit on its own: quota",
			queues:   capped,
			arrive:   []model.PodGroup{schedtest.Group("w").Queue("a").MinMember(3).Pods(3, schedtest.GPU(1, 0)).Obj()},
			wantCode: model.UnplacedAboveQueueLimit, wantWait: model.WaitQuota},
		{name: "a gang with fewer pods than minMember is not placed in part, though they fit",
			arrive:   []model.PodGroup{schedtest.Group("w").MinMember(4).Pods(2, schedtest.GPU(1, 0)).Obj()},
			wantCode: model.UnplacedMissingMembers, wantWait: model.WaitGang, wantMissing: 2},
		{name: "evicting for it: its victims' exit",
			queues:   []model.Queue{{Name: "a"}},
			first:    []model.PodGroup{schedtest.Group("low").Queue("a").Priority(1).Pods(1, schedtest.GPU(4, 0)).Obj()},
			arrive:   []model.PodGroup{schedtest.Group("w").Queue("a").Priority(5).Pods(1, schedtest.GPU(4, 0)).Obj()},
			budget:   -1,
			wantCode: model.UnplacedWaitingForVictims, wantWait: model.WaitVictims},
		{name: "fits only by a preemption its queue forbids: capacity, which would start it without one",
			queues:   []model.Queue{{Name: "a", NoPreemption: true}},
			first:    []model.PodGroup{schedtest.Group("low").Queue("a").Priority(1).Pods(1, schedtest.GPU(4, 0)).Obj()},
			arrive:   []model.PodGroup{schedtest.Group("w").Queue("a").Priority(5).Pods(1, schedtest.GPU(4, 0)).Obj()},
			budget:   -1,
			wantCode: model.UnplacedPreemptionDisabled, wantWait: model.WaitCapacity},
		{name: "a topology that means nothing: its spec",
			arrive:   []model.PodGroup{schedtest.Group("w").Topology(model.GangTopology{Required: "rack"}).Pods(1, schedtest.GPU(1, 0)).Obj()},
			wantCode: model.UnplacedBadTopology, wantWait: model.WaitSpec},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes, Queues: tc.queues, Pending: tc.first, Budget: model.DisruptionBudget{MaxEvictions: tc.budget}}, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			running(h, t)
			h.Snap.Pending = append(h.Snap.Pending, tc.arrive...)
			d, err := h.Cycle()
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range d.Binds {
				if b.Group == "w" {
					t.Fatalf("w was bound (%+v); want it waiting", b)
				}
			}
			var got *model.Unplaced
			for i := range d.Unplaced {
				if d.Unplaced[i].Group == "w" {
					got = &d.Unplaced[i]
				}
			}
			if got == nil {
				t.Fatalf("w is not among the unplaced %+v", d.Unplaced)
			}
			if got.Code != tc.wantCode || got.Wait != tc.wantWait || got.Missing != tc.wantMissing {
				t.Errorf("w: code %s wait %s missing %d (%s), want code %s wait %s missing %d", got.Code, got.Wait, got.Missing, got.Reason,
					tc.wantCode, tc.wantWait, tc.wantMissing)
			}
			for _, u := range d.Unplaced {
				if u.Wait == "" {
					t.Errorf("group %s unplaced (%s) says nothing of what it waits for", u.Group, u.Code)
				}
			}
		})
	}
}

// A gang waits for its missing members, then, once its pods are all
// there (or enough of them placed or finished), is placed like any other;
// a held preemptor that loses a member stops holding its room.
func TestMissingMembersArrive(t *testing.T) {
	nodes := schedtest.Cluster("n", 1, 4, 64000, 1<<20)
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: nodes,
		Pending: []model.PodGroup{schedtest.Group("g").MinMember(3).Pods(2, schedtest.GPU(1, 0)).Obj()}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 0 || len(d.Unplaced) != 1 || d.Unplaced[0].Missing != 1 {
		t.Fatalf("binds %+v unplaced %+v; want g waiting for 1 more pod", d.Binds, d.Unplaced)
	}
	// The third member arrives.
	h.Snap.Pending[0].Pods = append(h.Snap.Pending[0].Pods, model.Pod{Name: "g-late", Request: schedtest.GPU(1, 0)})
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 3 || len(d.Unplaced) != 0 {
		t.Fatalf("binds %+v unplaced %+v; want the whole gang of 3 bound", d.Binds, d.Unplaced)
	}
}
