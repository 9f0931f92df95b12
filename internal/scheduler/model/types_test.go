package model

import (
	"slices"
	"testing"
)

func TestAllRunning(t *testing.T) {
	pods := func(s *Snapshot) []string {
		var out []string
		for a := range s.AllRunning() {
			out = append(out, a.Pod)
		}
		return out
	}
	tests := []struct {
		name string
		snap Snapshot
		want []string
	}{
		{"none", Snapshot{}, nil},
		{"running", Snapshot{Running: []Allocation{{Pod: "a"}, {Pod: "b"}}}, []string{"a", "b"}},
		{"by node", Snapshot{RunningByNode: [][]Allocation{{{Pod: "a"}}, nil, {{Pod: "b"}, {Pod: "c"}}}}, []string{"a", "b", "c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pods(&tc.snap); !slices.Equal(got, tc.want) {
				t.Fatalf("AllRunning yields %v, want %v", got, tc.want)
			}
		})
	}
	// Stopping early stops the walk.
	s := Snapshot{RunningByNode: [][]Allocation{{{Pod: "a"}, {Pod: "b"}}}}
	for a := range s.AllRunning() {
		if a.Pod != "a" {
			t.Fatalf("first allocation %q, want a", a.Pod)
		}
		break
	}
}

func TestResourcesMax(t *testing.T) {
	got := Resources{MilliCPU: 1, MemoryMiB: 5, GPUMilli: 3}.Max(Resources{MilliCPU: 2, MemoryMiB: 4, GPUMilli: 3})
	if want := (Resources{MilliCPU: 2, MemoryMiB: 5, GPUMilli: 3}); got != want {
		t.Fatalf("Max = %+v, want %+v", got, want)
	}
}

// A share asked in replicas takes that many of each GPU's replicas; a part
// takes itself, at least one replica; a running allocation counted in
// replicas uses what its GPU gave.
func TestShareMilli(t *testing.T) {
	four, ten, free := GPU{MinShareMilli: 250}, GPU{MinShareMilli: 100}, GPU{}
	for _, tc := range []struct {
		name string
		g    GPU
		req  Request
		want int64
	}{
		{"one replica of four", four, Request{GPUMilli: 250, Replicas: 1}, 250},
		{"one replica of ten", ten, Request{GPUMilli: 250, Replicas: 1}, 100},
		{"three replicas of ten", ten, Request{GPUMilli: 750, Replicas: 3}, 300},
		{"five replicas of four fit nowhere", four, Request{GPUMilli: 500, Replicas: 5}, 1250},
		{"a part below a replica", four, Request{GPUMilli: 100}, 250},
		{"a part above a replica", ten, Request{GPUMilli: 460}, 460},
		{"a GPU without replicas", free, Request{GPUMilli: 250, Replicas: 1}, 250},
	} {
		if got := tc.g.ShareMilli(&tc.req); got != tc.want {
			t.Errorf("%s: ShareMilli = %d, want %d", tc.name, got, tc.want)
		}
	}
	a := Allocation{Request: Request{GPUMilli: 250, Replicas: 1, MilliCPU: 500}, GPUs: []GPUShare{{Index: 0, Milli: 100}}}
	if u := a.Usage(); u.GPUMilli != 100 || u.MilliCPU != 500 {
		t.Errorf("usage of a replica given a tenth: %+v, want 100 milli-GPU and its CPU", u)
	}
	a.Request.Replicas = 0
	if u := a.Usage(); u.GPUMilli != 250 {
		t.Errorf("usage of a part: %+v, want its 250 milli-GPU", u)
	}
}
