package queue

import (
	"errors"
	"math"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func gpu(m int64) model.Resources { return model.Resources{GPUMilli: m} }

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name   string
		queues []model.Queue
	}{
		{"cycle", []model.Queue{{Name: "a", Parent: "b"}, {Name: "b", Parent: "a"}}},
		{"self parent", []model.Queue{{Name: "a", Parent: "a"}}},
		{"unknown parent", []model.Queue{{Name: "a", Parent: "x"}}},
		{"duplicate", []model.Queue{{Name: "a"}, {Name: "a"}}},
		{"children above parent guarantee", []model.Queue{{Name: "p", Guaranteed: gpu(4000)}, {Name: "a", Parent: "p", Guaranteed: gpu(3000)}, {Name: "b", Parent: "p", Guaranteed: gpu(2000)}}},
		{"child limit above parent limit", []model.Queue{{Name: "p", Limit: gpu(4000)}, {Name: "a", Parent: "p", Limit: gpu(8000)}}},
		{"guarantee above own limit", []model.Queue{{Name: "a", Guaranteed: gpu(2000), Limit: gpu(1000)}}},
		{"negative weight", []model.Queue{{Name: "a", Weight: -1}}},
		{"negative GPU weight", []model.Queue{{Name: "a", Weights: model.ResourceWeights{GPUMilli: -1}}}},
		{"NaN CPU weight", []model.Queue{{Name: "a", Weights: model.ResourceWeights{MilliCPU: math.NaN()}}}},
		{"infinite memory weight", []model.Queue{{Name: "a", Weights: model.ResourceWeights{MemoryMiB: math.Inf(1)}}}},
		{"empty name", []model.Queue{{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.queues); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestFairShares(t *testing.T) {
	tr, err := New([]model.Queue{
		{Name: "org"},
		{Name: "a", Parent: "org", Guaranteed: gpu(2000), Weight: 1},
		{Name: "b", Parent: "org", Guaranteed: gpu(2000), Weight: 3},
		{Name: "c", Parent: "org", Guaranteed: gpu(4000), Limit: gpu(4000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := tr.Leaf("a"), tr.Leaf("b"), tr.Leaf("c")
	tr.AddDemand(a, gpu(10000))
	tr.AddDemand(b, gpu(10000))
	tr.AddDemand(c, gpu(1000)) // c wants little: its guarantee is lent out
	tr.ComputeFairShares(gpu(11000))
	// a and b get 2000 each guaranteed, c 1000; the 6000 left go 1:3.
	want := map[int]int64{a: 3500, b: 6500, c: 1000}
	for q, w := range want {
		if got := tr.FairShare(q).GPUMilli; got != w {
			t.Errorf("fair share of %s = %d, want %d", tr.Name(q), got, w)
		}
	}
	tr.AddUsage(c, gpu(4000))
	if tr.Admits(c, gpu(1)) {
		t.Error("queue c admitted past its limit")
	}
	if !tr.Admits(a, gpu(9000)) {
		t.Error("queue a without a limit refused")
	}
	if got := tr.Over(c, model.Resources{}); got != 4 {
		t.Errorf("Over(c) = %g, want 4", got)
	}
	if tr.Leaf("nope") != tr.Leaf(DefaultQueue) {
		t.Error("unknown queue does not map to the default queue")
	}
}

func TestPerResourceWeights(t *testing.T) {
	capacity := model.Resources{MilliCPU: 8000, MemoryMiB: 8000, GPUMilli: 8000}
	lots := model.Resources{MilliCPU: 100000, MemoryMiB: 100000, GPUMilli: 100000}
	tests := []struct {
		name   string
		a, b   model.Queue
		wantA  model.Resources
		wantB  model.Resources
		usage  model.Resources // both queues' usage, for the dominant shares
		wantDS [2]float64
	}{
		{
			name:  "GPU weights 3:1, CPU and memory by the default weight",
			a:     model.Queue{Name: "a", Parent: "org", Weights: model.ResourceWeights{GPUMilli: 3}},
			b:     model.Queue{Name: "b", Parent: "org", Weights: model.ResourceWeights{GPUMilli: 1}},
			wantA: model.Resources{MilliCPU: 4000, MemoryMiB: 4000, GPUMilli: 6000},
			wantB: model.Resources{MilliCPU: 4000, MemoryMiB: 4000, GPUMilli: 2000},
			// a's GPU share counts a third of b's.
			usage:  model.Resources{MilliCPU: 2000, GPUMilli: 6000},
			wantDS: [2]float64{0.25, 0.75},
		},
		{
			name:   "Weight is the default of every resource",
			a:      model.Queue{Name: "a", Parent: "org", Weight: 3},
			b:      model.Queue{Name: "b", Parent: "org", Weight: 1},
			wantA:  model.Resources{MilliCPU: 6000, MemoryMiB: 6000, GPUMilli: 6000},
			wantB:  model.Resources{MilliCPU: 2000, MemoryMiB: 2000, GPUMilli: 2000},
			usage:  model.Resources{GPUMilli: 6000},
			wantDS: [2]float64{0.25, 0.75},
		},
		{
			name:   "per-resource weight overrides Weight",
			a:      model.Queue{Name: "a", Parent: "org", Weight: 3, Weights: model.ResourceWeights{MilliCPU: 1}},
			b:      model.Queue{Name: "b", Parent: "org", Weight: 1},
			wantA:  model.Resources{MilliCPU: 4000, MemoryMiB: 6000, GPUMilli: 6000},
			wantB:  model.Resources{MilliCPU: 4000, MemoryMiB: 2000, GPUMilli: 2000},
			usage:  model.Resources{MilliCPU: 4000},
			wantDS: [2]float64{0.5, 0.5},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New([]model.Queue{{Name: "org"}, tc.a, tc.b})
			if err != nil {
				t.Fatal(err)
			}
			a, b := tr.Leaf("a"), tr.Leaf("b")
			tr.AddDemand(a, lots)
			tr.AddDemand(b, lots)
			tr.ComputeFairShares(capacity)
			if got := tr.FairShare(a); got != tc.wantA {
				t.Errorf("fair share of a = %+v, want %+v", got, tc.wantA)
			}
			if got := tr.FairShare(b); got != tc.wantB {
				t.Errorf("fair share of b = %+v, want %+v", got, tc.wantB)
			}
			tr.AddUsage(a, tc.usage)
			tr.AddUsage(b, tc.usage)
			for k, q := range []int{a, b} {
				if got := tr.DominantShare(q, capacity); math.Abs(got-tc.wantDS[k]) > 1e-9 {
					t.Errorf("dominant share of %s = %g, want %g", tr.Name(q), got, tc.wantDS[k])
				}
			}
		})
	}
}

func TestGuaranteeRule(t *testing.T) {
	newTree := func(t *testing.T) (*Tree, int, int) {
		t.Helper()
		tr, err := New([]model.Queue{{Name: "org"}, {Name: "a", Parent: "org", Guaranteed: gpu(4000)}, {Name: "b", Parent: "org", Guaranteed: gpu(4000)}})
		if err != nil {
			t.Fatal(err)
		}
		a, b := tr.Leaf("a"), tr.Leaf("b")
		tr.AddUsage(b, gpu(8000))
		tr.AddDemand(a, gpu(4000))
		tr.ComputeFairShares(gpu(16000))
		return tr, a, b
	}
	tests := []struct {
		name string
		ok   func(tr *Tree, a, b int) bool
		want bool
	}{
		{"reclaimer within its guarantee", func(tr *Tree, a, _ int) bool { return tr.FitsGuarantee(a, gpu(4000)) }, true},
		{"reclaimer above its guarantee", func(tr *Tree, a, _ int) bool { return tr.FitsGuarantee(a, gpu(5000)) }, false},
		{"reclaimer asks for no GPU", func(tr *Tree, a, _ int) bool { return tr.FitsGuarantee(a, model.Resources{MilliCPU: 1000}) }, false},
		{"parent queue never reclaims", func(tr *Tree, _, _ int) bool { return tr.FitsGuarantee(tr.Leaf("org"), gpu(1000)) }, false},
		{"victim keeps its guarantee", func(tr *Tree, _, b int) bool { return tr.KeepsGuarantee(b, gpu(4000)) }, true},
		{"victim would drop below its guarantee", func(tr *Tree, _, b int) bool { return tr.KeepsGuarantee(b, gpu(5000)) }, false},
		{"victim holds no GPU", func(tr *Tree, _, b int) bool { return tr.KeepsGuarantee(b, model.Resources{MilliCPU: 1000}) }, false},
		{"reclaimer would pass a scarce fair share", func(tr *Tree, a, _ int) bool {
			tr.ComputeFairShares(gpu(6000)) // a wants 4, b holds 8: a's fair share is 3
			return tr.FitsGuarantee(a, gpu(4000))
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, a, b := newTree(t)
			if got := tc.ok(tr, a, b); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAboveFairShare(t *testing.T) {
	tr, err := New([]model.Queue{{Name: "a"}, {Name: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := tr.Leaf("a"), tr.Leaf("b")
	// GPUs are scarce (a and b want 12 of 8), CPU is not.
	tr.AddUsage(a, model.Resources{GPUMilli: 6000, MilliCPU: 1000})
	tr.AddUsage(b, model.Resources{GPUMilli: 2000, MilliCPU: 60000})
	tr.AddDemand(b, gpu(4000))
	tr.ComputeFairShares(model.Resources{GPUMilli: 8000, MilliCPU: 100000})
	if !tr.AboveFairShare(a) || !tr.KeepsFairShare(a, gpu(1000)) {
		t.Errorf("a uses 6 of its 4 GPUs' fair share: want above it, able to give one up")
	}
	// b is above its CPU share, but CPU is not scarce: it has nothing a
	// fair-share reclaim may take.
	if tr.AboveFairShare(b) || tr.KeepsFairShare(b, model.Resources{MilliCPU: 1000}) {
		t.Errorf("b uses 2 of its 4 GPUs' fair share and no scarce resource above it: want not above")
	}
}

// LimitBelow finds the queue whose limit a need exceeds on its own, from the
// leaf up; usage does not count.
func TestLimitBelow(t *testing.T) {
	gpus := func(n int64) model.Resources { return model.Resources{GPUMilli: n * 1000} }
	tr, err := New([]model.Queue{{Name: "org", Limit: gpus(6)}, {Name: "a", Parent: "org", Limit: gpus(3)}, {Name: "b", Parent: "org"}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := tr.Leaf("a"), tr.Leaf("b")
	tr.AddUsage(a, gpus(3))
	for _, tc := range []struct {
		leaf int
		need int64
		want string
	}{{a, 3, ""}, {a, 4, "a"}, {b, 6, ""}, {b, 7, "org"}, {a, 7, "a"}} {
		q, over := tr.LimitBelow(tc.leaf, gpus(tc.need))
		got := ""
		if over {
			got = tr.Name(q)
		}
		if got != tc.want {
			t.Errorf("LimitBelow(%s, %d GPUs) = %q, want %q", tr.Name(tc.leaf), tc.need, got, tc.want)
		}
	}
}
