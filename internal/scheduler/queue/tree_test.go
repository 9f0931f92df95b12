package queue

import (
	"errors"
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
