package queue

import (
	"math"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func TestDecay(t *testing.T) {
	const hl = 100
	prev := &model.QueueUsage{Queue: "a", GPUMilli: 8000, MilliCPU: 1000, At: 1000}
	tests := []struct {
		name  string
		prev  *model.QueueUsage
		usage model.Resources
		now   int64
		want  float64 // GPUMilli
	}{
		{"one half-life of nothing halves it", prev, model.Resources{}, 1100, 4000},
		{"two half-lives of nothing quarter it", prev, model.Resources{}, 1200, 2000},
		{"one half-life of the same keeps it", prev, gpu(8000), 1100, 8000},
		{"one half-life of more moves halfway", prev, gpu(16000), 1100, 12000},
		{"the same instant keeps it", prev, gpu(0), 1000, 8000},
		{"no past starts from now", nil, gpu(3000), 1100, 3000},
		{"another queue's past starts from now", &model.QueueUsage{Queue: "b", GPUMilli: 8000, At: 1000}, gpu(3000), 1100, 3000},
		{"a past from the future starts from now", &model.QueueUsage{Queue: "a", GPUMilli: 8000, At: 5000}, gpu(3000), 1100, 3000},
		{"a negative past starts from now", &model.QueueUsage{Queue: "a", GPUMilli: -1, At: 1000}, gpu(3000), 1100, 3000},
		{"a NaN past starts from now", &model.QueueUsage{Queue: "a", MemoryMiB: math.NaN(), At: 1000}, gpu(3000), 1100, 3000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decay("a", tc.prev, tc.usage, tc.now, hl)
			if math.Abs(got.GPUMilli-tc.want) > 1e-6 || got.At != tc.now || got.Queue != "a" {
				t.Fatalf("Decay = %+v, want %g GPU milli at %d", got, tc.want, tc.now)
			}
		})
	}
	if got := Decay("a", prev, gpu(0), 1100, 0); got.GPUMilli != 0 {
		t.Errorf("without a half-life Decay = %+v, want the usage now", got)
	}
}

// A queue that used less than its weight's share lately gets more of
// what is left over guarantees; one that used more, less; queues without
// a half-life keep their weights.
func TestFairSharesFollowUsageOverTime(t *testing.T) {
	tests := []struct {
		name       string
		halfLife   [2]int64
		past       [2]float64
		wantA      int64
		wantB      int64
		wantAShare float64 // DominantShare of a with 4 GPUs used
	}{
		{"no half-life: equal weights split evenly", [2]int64{0, 0}, [2]float64{8000, 0}, 4000, 4000, 0.5},
		{"no past yet: evenly", [2]int64{100, 100}, [2]float64{0, 0}, 4000, 4000, 0.5},
		{"past in proportion to weights: evenly", [2]int64{100, 100}, [2]float64{4000, 4000}, 4000, 4000, 0.5},
		// a used everything: tilt 2^(1-1/0.5) = 1/2; b nothing: 2.
		{"a used everything lately", [2]int64{100, 100}, [2]float64{8000, 0}, 1600, 6400, 1},
		// a used three quarters: 2^(1-1.5) against 2^(1-0.5).
		{"a used three quarters", [2]int64{100, 100}, [2]float64{6000, 2000}, 2666, 5333, 0.5 / math.Exp2(-0.5)},
		// b has no half-life: only a is tilted, by its own past alone
		// (it is the only sibling with one, so its share of it is all:
		// tilt 2^(1-1/1) = 1).
		{"only a has a half-life", [2]int64{100, 0}, [2]float64{8000, 0}, 4000, 4000, 0.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New([]model.Queue{{Name: "a", UsageHalfLife: tc.halfLife[0]}, {Name: "b", UsageHalfLife: tc.halfLife[1]}})
			if err != nil {
				t.Fatal(err)
			}
			a, b := tr.Leaf("a"), tr.Leaf("b")
			tr.SetPast(a, model.QueueUsage{Queue: "a", GPUMilli: tc.past[0]})
			tr.SetPast(b, model.QueueUsage{Queue: "b", GPUMilli: tc.past[1]})
			tr.AddDemand(a, gpu(8000))
			tr.AddDemand(b, gpu(8000))
			tr.ComputeFairShares(gpu(8000))
			if fa, fb := tr.FairShare(a).GPUMilli, tr.FairShare(b).GPUMilli; math.Abs(float64(fa-tc.wantA)) > 1 || math.Abs(float64(fb-tc.wantB)) > 1 {
				t.Errorf("fair shares a %d, b %d; want %d, %d", fa, fb, tc.wantA, tc.wantB)
			}
			tr.AddUsage(a, gpu(4000))
			if got := tr.DominantShare(a, gpu(8000)); math.Abs(got-tc.wantAShare) > 1e-9 {
				t.Errorf("a's dominant share %g, want %g (its weight tilted by its past)", got, tc.wantAShare)
			}
		})
	}
}

func TestTiltIsBounded(t *testing.T) {
	qs := []model.Queue{{Name: "big", UsageHalfLife: 1, Weight: 1}}
	for _, n := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"} {
		qs = append(qs, model.Queue{Name: n, UsageHalfLife: 1, Weight: 1})
	}
	tr, err := New(qs)
	if err != nil {
		t.Fatal(err)
	}
	tr.SetPast(tr.Leaf("big"), model.QueueUsage{GPUMilli: 1e9})
	tr.ComputeFairShares(gpu(8000))
	// big's share of the past is 1 against a weight share of 1/10: 2^-9,
	// clamped to a sixteenth.
	if got := tr.nodes[tr.Leaf("big")].tilt[2]; got != minTilt {
		t.Errorf("tilt %g, want the floor %g", got, minTilt)
	}
	if got := tr.nodes[tr.Leaf("s1")].tilt[2]; got != maxTilt {
		t.Errorf("tilt %g, want the ceiling %g", got, maxTilt)
	}
}
