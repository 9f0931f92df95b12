package simulator

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func nearAll(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestEntitled(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		capacity             float64
		weight, demand, want []float64
	}{
		{"everyone wants more", 100, []float64{3, 1}, []float64{200, 200}, []float64{75, 25}},
		{"a small demand leaves the rest to the others", 100, []float64{1, 1, 2}, []float64{10, 100, 100}, []float64{10, 30, 60}},
		{"capped in two rounds", 100, []float64{1, 1, 1}, []float64{10, 30, 100}, []float64{10, 30, 60}},
		{"all demand met", 100, []float64{1, 1}, []float64{20, 30}, []float64{20, 30}},
		{"no demand, nothing", 100, []float64{1, 1}, []float64{0, 50}, []float64{0, 50}},
		{"weightless queues get what is left, evenly", 100, []float64{0, 0, 1}, []float64{100, 100, 40}, []float64{30, 30, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := entitled(tc.capacity, tc.weight, tc.demand); !nearAll(got, tc.want) {
				t.Fatalf("entitled = %v, want %v", got, tc.want)
			}
		})
	}
}

// Two queues of equal weight on 100 GPUs, both wanting everything, one
// using 80 and the other 20 for 10 s: entitled 50 each, deviation 0.3
// each, Jain (1.6+0.4)^2/(2*(2.56+0.16)) = 4/5.44; then 10 s with only
// the first wanting and using 100 (deviation 0, Jain 1); then 10 s with
// nothing wanted, which does not count.
func TestFairnessOverTime(t *testing.T) {
	f := newFairness(100, []float64{1, 1})
	f.observe(10, []float64{80, 20}, []float64{100, 100})
	f.observe(10, []float64{100, 0}, []float64{100, 0})
	f.observe(10, []float64{0, 0}, []float64{0, 0})
	if !near(f.deviation(0), 0.15) || !near(f.deviation(1), 0.15) || !near(f.meanDeviation(), 0.15) {
		t.Fatalf("deviations %g %g mean %g, want 0.15", f.deviation(0), f.deviation(1), f.meanDeviation())
	}
	if want := (4/5.44 + 1) / 2; !near(f.jain(), want) {
		t.Fatalf("jain %g, want %g", f.jain(), want)
	}
}

// lostCase: one node of 2 GPUs. Queue b, guaranteed nothing, starts a
// 2-GPU job at 0 that runs 10,000 s and checkpoints every `every` s;
// queue a, guaranteed both GPUs, asks for them at 1,000 s for 500 s and
// reclaims them. b loses 2 GPUs x (1,000 - its last checkpoint) and
// resumes from that checkpoint once a is done.
func lostCase(every int64) *Trace {
	return &Trace{
		Source: "lost",
		Nodes:  []model.Node{{Name: "n0", MilliCPU: 8000, MemoryMiB: 8000, GPUs: []model.GPU{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}}}},
		Queues: []model.Queue{{Name: "a", Guaranteed: model.Resources{GPUMilli: 2000}}, {Name: "b"}},
		Pods: []TracePod{
			{Name: "b0", Request: model.Request{MilliCPU: 100, MemoryMiB: 100, GPUs: 2}, CreatedAt: 0, Duration: 10000, Queue: "b", CheckpointEvery: every},
			{Name: "a0", Request: model.Request{MilliCPU: 100, MemoryMiB: 100, GPUs: 2}, CreatedAt: 1000, Duration: 500, Queue: "a"},
		},
	}
}

func TestRunEventLostGPUHours(t *testing.T) {
	for _, tc := range []struct {
		name    string
		every   int64
		lost    float64 // GPU-seconds
		bJCT    float64
		aWait   float64
		preempt int
	}{
		// Checkpoints at 600: 400 s of 2 GPUs lost; a binds one cycle
		// (60 s) after its victims leave, runs to 1,560; b resumes there
		// with 10,000 - 600 s left and ends at 10,960.
		{"checkpointed", 600, 2 * 400, 10960, 60, 1},
		// Never checkpoints: all 1,000 s lost, b starts over at 1,560.
		{"never", 0, 2 * 1000, 11560, 60, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RunEvent(context.Background(), lostCase(tc.every), EventConfig{Policy: "bestfit", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			e := r.Event
			if e.Preemptions != tc.preempt || e.Moves != 0 {
				t.Fatalf("preemptions %d moves %d, want %d and 0", e.Preemptions, e.Moves, tc.preempt)
			}
			if want := tc.lost / 3600; !near(e.LostGPUHours, want) || e.LostGPUHoursMoves != 0 {
				t.Fatalf("lost %g GPU-hours, %g of them to moves; want %g, none to moves", e.LostGPUHours, e.LostGPUHoursMoves, want)
			}
			// Both GPUs are held while b runs first (1,000 s), a runs
			// (500 s) and b runs again until it ends; idle from the
			// eviction to a's bind.
			if want := 2 * (1000 + 500 + tc.bJCT - 1560) / 3600; !near(e.GPUHours, want) {
				t.Fatalf("%g GPU-hours allocated, want %g", e.GPUHours, want)
			}
			q := map[string]QueueStats{}
			for _, s := range e.Queues {
				q[s.Queue] = s
			}
			if !near(q["b"].LostGPUHours, tc.lost/3600) || q["a"].LostGPUHours != 0 {
				t.Fatalf("lost by queue a %g b %g", q["a"].LostGPUHours, q["b"].LostGPUHours)
			}
			if q["b"].JCTP50 != tc.bJCT || q["a"].WaitP50 != tc.aWait || q["a"].JCTP50 != tc.aWait+500 {
				t.Fatalf("b's JCT %g (want %g), a's wait %g (want %g) and JCT %g", q["b"].JCTP50, tc.bJCT, q["a"].WaitP50, tc.aWait, q["a"].JCTP50)
			}
			if e.Jobs != 2 || e.JobsCompleted != 2 || !near(e.JCTMean, (tc.bJCT+tc.aWait+500)/2) {
				t.Fatalf("jobs %d done %d mean JCT %g", e.Jobs, e.JobsCompleted, e.JCTMean)
			}
			// Nearest rank over the two jobs: p50 the lesser, p95 the greater.
			if e.JCTP50 != tc.aWait+500 || e.JCTP95 != tc.bJCT || e.WaitP50 != 0 || e.WaitP95 != tc.aWait {
				t.Fatalf("JCT p50 %g p95 %g, wait p50 %g p95 %g", e.JCTP50, e.JCTP95, e.WaitP50, e.WaitP95)
			}
		})
	}
}

// Over the same run, fairness by hand: 0-1,000 b alone wants and uses
// both GPUs (deviation 0); 1,000-1,060 a wants 2 and b 2, a's guarantee
// weighs and b's is 0, so a is entitled to both while nobody holds them;
// 1,060-1,560 a holds them (deviation 0); then b alone again.
func TestRunEventFairnessDeviation(t *testing.T) {
	r, err := RunEvent(context.Background(), lostCase(600), EventConfig{Policy: "bestfit", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := r.Event
	span := 10960.0
	// a: |0-2| over 60 s; b: |0-0|: entitled nothing while a wants all.
	wantA := 2.0 / 2 * 60 / span
	q := map[string]QueueStats{}
	for _, s := range e.Queues {
		q[s.Queue] = s
	}
	if !near(q["a"].FairnessDeviation, wantA) || q["b"].FairnessDeviation != 0 || !near(e.FairnessDeviation, wantA/2) {
		t.Fatalf("deviation a %g (want %g) b %g mean %g", q["a"].FairnessDeviation, wantA, q["b"].FairnessDeviation, e.FairnessDeviation)
	}
	// Jain: 0 in the 60 s a is entitled to everything and holds nothing,
	// 1 otherwise.
	if want := (span - 60) / span; !near(e.JainOverTime, want) {
		t.Fatalf("jain over time %g, want %g", e.JainOverTime, want)
	}
}

// The allocation plot samples each run at whole hours (its last point by
// then) and averages over seeds: hours 0, 1, 2 give (0.5+0)/2,
// (1+0)/2 and (1+0.5)/2, a mean of 50%.
func TestWriteEventPlotMeans(t *testing.T) {
	runs := []*Result{
		{Policy: "p", Event: &EventStats{Utilization: []UtilPoint{{Time: 0, MilliGPUAllocationRatio: 0.5}, {Time: 3600, MilliGPUAllocationRatio: 1}}}},
		{Policy: "p", Event: &EventStats{Utilization: []UtilPoint{{Time: 0, MilliGPUAllocationRatio: 0}, {Time: 7200, MilliGPUAllocationRatio: 0.5}}}},
	}
	var b strings.Builder
	if err := WriteEventPlot(&b, "t", runs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "p, mean 50.0%") {
		t.Fatalf("legend without the mean of 50%%:\n%s", b.String())
	}
}
