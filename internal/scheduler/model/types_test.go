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
