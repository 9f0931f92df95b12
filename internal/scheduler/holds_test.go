package scheduler_test

import (
	"reflect"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// holdScenario: one node of 8 GPUs runs "low", two pods of 2 GPUs on GPUs
// 4-7 (and "other", which may not be evicted, on 0-3); "urgent", a higher-priority pod of the same
// queue asking for 4 GPUs, evicts low and waits for it.
func holdScenario(t *testing.T) (*scheduler.Scheduler, model.Snapshot, model.Decisions) {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	whole := func(pod, group string, prio int32, gpus ...int) model.Allocation {
		a := model.Allocation{Pod: pod, Group: group, Queue: "a", Priority: prio, Node: "n", Request: schedtest.GPU(len(gpus), 1000)}
		for _, g := range gpus {
			a.GPUs = append(a.GPUs, model.GPUShare{Index: g, Milli: 1000})
		}
		return a
	}
	other := whole("other", "other", 50, 0, 1, 2, 3)
	other.NonPreemptible = true
	snap := model.Snapshot{
		Nodes:  []model.Node{schedtest.Node("n", 64000, 1<<20).GPUs(8, "A100").Obj()},
		Queues: []model.Queue{{Name: "a"}},
		RunningByNode: [][]model.Allocation{{other,
			whole("low-0", "low", 1, 4, 5), whole("low-1", "low", 1, 6, 7)}},
		Pending:     []model.PodGroup{schedtest.Group("urgent").Queue("a").Priority(100).Pods(1, schedtest.GPU(4, 1000)).Obj()},
		Budget:      model.DisruptionBudget{MaxEvictions: -1},
		HoldTimeout: 60,
		Now:         1000,
	}
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Evictions) != 2 || len(d.Binds) != 0 || len(d.Holds) != 1 {
		t.Fatalf("evictions %+v, binds %+v, holds %+v: want low evicted and urgent held", d.Evictions, d.Binds, d.Holds)
	}
	h := d.Holds[0]
	if h.Group != "urgent" || h.Since != 1000 || !reflect.DeepEqual(h.Victims, []string{"low-0", "low-1"}) || len(h.Plan) != 1 {
		t.Fatalf("hold %+v, want urgent waiting for low-0 and low-1 since 1000", h)
	}
	if len(d.Unplaced) != 1 || d.Unplaced[0].Code != model.UnplacedWaitingForVictims {
		t.Fatalf("unplaced %+v, want urgent waiting for its victims", d.Unplaced)
	}
	return s, snap, d
}

// TestHoldKeepsTheRoomItsVictimsFree: while one victim still runs
// (terminating), the GPUs the other freed are out of reach of a pending
// group that would take them, whatever its priority; once the last victim
// is gone the preemptor binds exactly as planned, first in the cycle.
func TestHoldKeepsTheRoomItsVictimsFree(t *testing.T) {
	s, snap, d := holdScenario(t)
	plan := d.Holds[0].Plan

	// low-0 exited; low-1 is terminating (not preemptible any more). A
	// 2-GPU pod arrives that would fit on low-0's GPUs.
	run := schedtest.Running(&snap)
	run = []model.Allocation{run[0], run[2]}
	run[1].NonPreemptible = true
	snap.RunningByNode = schedtest.OnNodes(snap.Nodes, run...)
	snap.Pending = append(snap.Pending, schedtest.Group("grab").Queue("a").Priority(200).Pods(1, schedtest.GPU(2, 1000)).Obj())
	snap.Holds, snap.Now = d.Holds, 1010
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 0 || len(d.Evictions) != 0 {
		t.Fatalf("binds %+v, evictions %+v: the room low-0 freed is urgent's", d.Binds, d.Evictions)
	}
	if len(d.Holds) != 1 || !reflect.DeepEqual(d.Holds[0].Victims, []string{"low-1"}) || d.Holds[0].Since != 1000 {
		t.Fatalf("holds %+v, want urgent still waiting for low-1 since 1000", d.Holds)
	}

	// low-1 exited: urgent binds on its plan; grab still finds no room.
	snap.RunningByNode = schedtest.OnNodes(snap.Nodes, run[0])
	snap.Holds, snap.Now = d.Holds, 1020
	d, err = s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Holds) != 0 || len(d.Binds) != 1 || !reflect.DeepEqual(d.Binds[0].GPUs, plan[0].GPUs) || d.Binds[0].Pod != plan[0].Pod {
		t.Fatalf("binds %+v, holds %+v; want urgent bound on its plan %+v", d.Binds, d.Holds, plan)
	}
}

// TestHoldEnds: a hold ends, and its group competes afresh in the same
// cycle, when its victims outlive the timeout, when its plan no longer
// fits, and when its driver leaves it out (an eviction was refused).
func TestHoldEnds(t *testing.T) {
	tests := []struct {
		name string
		// change the second snapshot; held says whether urgent still waits.
		change func(snap *model.Snapshot)
		held   bool
	}{
		{name: "victims still running within the timeout", change: func(snap *model.Snapshot) { snap.Now = 1059 }, held: true},
		{name: "victims outlive the timeout", change: func(snap *model.Snapshot) { snap.Now = 1060 }},
		{name: "driver dropped the hold", change: func(snap *model.Snapshot) { snap.Holds = nil }},
		{name: "no timeout", change: func(snap *model.Snapshot) { snap.HoldTimeout, snap.Now = 0, 1<<40 }, held: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, snap, d := holdScenario(t)
			run := schedtest.Running(&snap)
			for i := range run[1:] {
				run[1+i].NonPreemptible = true // terminating
			}
			snap.RunningByNode = schedtest.OnNodes(snap.Nodes, run...)
			snap.Holds, snap.Now = d.Holds, 1030
			tt.change(&snap)
			d, err := s.Cycle(&snap)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(d.Holds) == 1; got != tt.held {
				t.Fatalf("holds %+v, want held: %v", d.Holds, tt.held)
			}
			if len(d.Unplaced) != 1 {
				t.Fatalf("unplaced %+v, want urgent", d.Unplaced)
			}
			want := model.UnplacedWaitingForVictims
			if !tt.held {
				want = model.UnplacedNoFit // its victims are terminating: nothing more to evict
			}
			if d.Unplaced[0].Code != want {
				t.Fatalf("unplaced %+v, want code %s", d.Unplaced, want)
			}
		})
	}

	// The victims are gone but the plan's node went with them: urgent
	// competes afresh and takes the new node in the same cycle.
	s, snap, d := holdScenario(t)
	snap.Nodes = []model.Node{schedtest.Node("m", 64000, 1<<20).GPUs(8, "A100").Obj()}
	snap.RunningByNode = nil
	snap.Holds, snap.Now = d.Holds, 1010
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Holds) != 0 || len(d.Binds) != 1 || d.Binds[0].Node != "m" {
		t.Fatalf("binds %+v, holds %+v: want urgent placed afresh on m", d.Binds, d.Holds)
	}
}

// TestHoldCountsInItsQueue: a waiting preemptor counts in its queue's
// usage, so the queue's limit keeps a later group of the queue from taking
// room elsewhere that would leave no quota for the preemptor's plan.
func TestHoldCountsInItsQueue(t *testing.T) {
	s, snap, d := holdScenario(t)
	snap.Queues[0].Limit = model.Resources{GPUMilli: 12000}
	snap.Nodes = append(snap.Nodes, schedtest.Node("m", 64000, 1<<20).GPUs(8, "A100").Obj())
	run := schedtest.Running(&snap)[:2] // low-0 exited, low-1 terminating
	run[1].NonPreemptible = true
	snap.RunningByNode = schedtest.OnNodes(snap.Nodes, run...)
	snap.Pending = append(snap.Pending, schedtest.Group("more").Queue("a").Priority(10).Pods(1, schedtest.GPU(4, 1000)).Obj())
	snap.Holds, snap.Now = d.Holds, 1010
	d, err := s.Cycle(&snap)
	if err != nil {
		t.Fatal(err)
	}
	// other 4 + low-1 2 + urgent's 4 leave 2 GPUs of the limit: more waits.
	if len(d.Binds) != 0 || len(d.Holds) != 1 {
		t.Fatalf("binds %+v, holds %+v: want more kept out by the limit urgent counts in", d.Binds, d.Holds)
	}
	for _, u := range d.Unplaced {
		if u.Group == "more" && u.Code == model.UnplacedNoFit {
			t.Fatalf("more unplaced as %+v, want the queue's limit named", u)
		}
	}
}
