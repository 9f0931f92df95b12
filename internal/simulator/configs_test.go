package simulator

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

func TestParseSchedulerConfigs(t *testing.T) {
	got, err := ParseSchedulerConfigs(" kai-like,fifo-bestfit ")
	if err != nil || len(got) != 2 || got[0].Name != "kai-like" || got[1].Name != "fifo-bestfit" {
		t.Fatalf("ParseSchedulerConfigs = %v, %v", got, err)
	}
	for _, bad := range []string{"", "volcano", "gpuplane,nope"} {
		if _, err := ParseSchedulerConfigs(bad); err == nil {
			t.Errorf("ParseSchedulerConfigs(%q): no error", bad)
		}
	}
	for _, c := range SchedulerConfigs() {
		if _, err := placement.NewPolicy(c.Placement, placement.PolicyEnv{Targets: []placement.Target{{P: 1}}}); err != nil {
			t.Errorf("%s: placement %v", c.Name, err)
		}
	}
}

func TestSchedulerConfigQueues(t *testing.T) {
	teams := []model.Queue{{Name: "a", Weight: 0.7, Guaranteed: model.Resources{GPUMilli: 7000}}, {Name: "b", Weight: 0.3}}
	byName := func(n string) SchedulerConfig {
		cs, err := ParseSchedulerConfigs(n)
		if err != nil {
			t.Fatal(err)
		}
		return cs[0]
	}
	fifo, gp, kai := byName("fifo-bestfit"), byName("gpuplane-plain"), byName("kai-like")
	q := fifo.queues(teams)
	if len(q) != 1 || q[0].Name != oneQueue || !q[0].NoPreemption || !q[0].NoReclaim || q[0].Guaranteed != (model.Resources{}) {
		t.Fatalf("fifo queues %+v, want one queue without guarantee, preemption or reclaim", q)
	}
	if fifo.queueOf("b") != oneQueue || fifo.priority(5) != 0 {
		t.Fatal("fifo keeps teams' queues or priorities")
	}
	if q := gp.queues(teams); q[0].Weight != 0.7 || q[0].NoReclaim || gp.queueOf("b") != "b" || gp.priority(5) != 5 {
		t.Fatalf("gpuplane changed the queues: %+v", q)
	}
	if q := kai.queues(teams); q[0].Weight != 1 || q[1].Weight != 1 || q[0].Guaranteed.GPUMilli != 7000 {
		t.Fatalf("kai-like queues %+v, want weight 1 and the guarantee kept", q)
	}
	if teams[0].Weight != 0.7 {
		t.Fatal("queues changed the trace's queues")
	}
	withMin := SchedulerConfig{MinRuntime: 900}
	if q := withMin.queues(teams); q[0].MinRuntime != 900 || q[1].MinRuntime != 900 || teams[0].MinRuntime != 0 {
		t.Fatalf("queues %+v, want every queue's minimum runtime 900 and the trace's kept", q)
	}
}

// A configuration's victim order and moves reach the core's snapshot, and
// its minimum runtime the queues; gpuplane and gpuplane-by-age differ in
// the victim order alone, gpuplane and gpuplane-no-defrag in moves and
// drains alone.
func TestSchedulerConfigPoliciesReachTheCore(t *testing.T) {
	tr, err := GenerateContended(builtin(t), ContendedSpec{Seed: 3, Nodes: 12, Hours: 1, Load: 1.5, Teams: DefaultTeams(), BurstFactor: 1,
		MinRunTime: 60, MaxRunTime: 600, MaxGangShare: 0.25, CheckpointShare: 1, CheckpointIntervals: []int64{300}, MovableShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		byAge      bool
		maxMoves   int
		drainAfter int64
		minRun     int64
	}
	look := func(c SchedulerConfig) seen {
		var s seen
		if _, err := RunEvent(context.Background(), tr, EventConfig{Seed: 1, Config: &c, OnCycle: func(_ int64, snap *model.Snapshot, _ *model.Decisions) {
			s = seen{snap.VictimsByAge, snap.Defrag.MaxMoves, snap.Defrag.DrainAfter, snap.Queues[0].MinRuntime}
		}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	configs := map[string]SchedulerConfig{}
	for _, c := range SchedulerConfigs() {
		configs[c.Name] = c
	}
	gp, age, still := configs["gpuplane"], configs["gpuplane-by-age"], configs["gpuplane-no-defrag"]
	if got := look(gp); got.byAge || got.maxMoves != gp.DefragMovesPerHour || got.maxMoves == 0 || got.drainAfter != gp.DefragDrainAfter || got.drainAfter == 0 {
		t.Errorf("gpuplane: core saw %+v, want checkpoint-aware victims, %d moves an hour and drains after %d s", got, gp.DefragMovesPerHour, gp.DefragDrainAfter)
	}
	if got := look(age); !got.byAge || got.maxMoves != gp.DefragMovesPerHour {
		t.Errorf("gpuplane-by-age: core saw %+v, want victims by age and gpuplane's moves", got)
	}
	if got := look(still); got.byAge || got.maxMoves != 0 || got.drainAfter != 0 {
		t.Errorf("gpuplane-no-defrag: core saw %+v, want no moves and no drains", got)
	}
	age.VictimsByAge, still.DefragMovesPerHour, still.DefragDrainAfter = false, gp.DefragMovesPerHour, gp.DefragDrainAfter
	age.Name, still.Name, age.About, still.About = gp.Name, gp.Name, gp.About, gp.About
	if age != gp || still != gp {
		t.Errorf("gpuplane-by-age or gpuplane-no-defrag differ from gpuplane in more than their one policy")
	}
	if got := look(SchedulerConfig{Name: "min", Placement: "bestfit", MinRuntime: 1200}); got.minRun != 1200 {
		t.Errorf("minimum runtime: core's queue saw %d, want 1200", got.minRun)
	}
}

// Every configuration replays one seed's generated workload, and results
// are reported by the trace's teams, FIFO's single queue included.
func TestRunAllConfigsOnGeneratedWorkload(t *testing.T) {
	tb := builtin(t)
	spec := smallSpec(0)
	spec.Nodes, spec.Hours = 24, 3
	gen := func(seed uint64) (*Trace, error) {
		s := spec
		s.Seed = seed
		return GenerateContended(tb, s)
	}
	res, err := RunAll(context.Background(), nil, Spec{Mode: ModeEvent, Configs: SchedulerConfigs(), Seeds: []uint64{1, 2}, Generate: gen, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2*len(SchedulerConfigs()) {
		t.Fatalf("%d results", len(res))
	}
	jobs := map[uint64]int{}
	for _, r := range res {
		if j, ok := jobs[r.Seed]; ok && j != r.Event.Jobs {
			t.Fatalf("%s seed %d: %d jobs, another configuration had %d", r.Policy, r.Seed, r.Event.Jobs, j)
		}
		jobs[r.Seed] = r.Event.Jobs
		if r.FailedPods != 0 || r.Event.JobsCompleted != r.Event.Jobs {
			t.Fatalf("%s seed %d: %d pods never ran, %d of %d jobs done; every job drawn must fit the cluster", r.Policy, r.Seed, r.FailedPods, r.Event.JobsCompleted, r.Event.Jobs)
		}
		var names []string
		for _, q := range r.Event.Queues {
			names = append(names, q.Queue)
		}
		if got := strings.Join(names, ","); got != "team-a,team-b,team-c,team-d" {
			t.Fatalf("%s: queues %s", r.Policy, got)
		}
	}
	if jobs[1] == jobs[2] {
		t.Fatalf("seeds 1 and 2 made workloads of %d jobs each; each seed should draw its own", jobs[1])
	}
	sums := SummarizeEvent(res)
	if len(sums) != len(SchedulerConfigs()) || sums[0].Policy != "fifo-bestfit" || sums[0].Runs != 2 || len(sums[0].Queues) != 4 {
		t.Fatalf("summaries %+v", sums)
	}
	if want := float64(jobs[1]+jobs[2]) / 2; sums[0].Jobs != want {
		t.Fatalf("mean jobs %g, want %g", sums[0].Jobs, want)
	}
	if _, err := RunAll(context.Background(), nil, Spec{Mode: ModePacking, Configs: SchedulerConfigs(), Seeds: []uint64{1}, Generate: gen}); err == nil {
		t.Fatal("configurations ran in packing mode")
	}
}
