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
	fifo, gp, kai := schedulerConfigs[0], schedulerConfigs[1], schedulerConfigs[2]
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
