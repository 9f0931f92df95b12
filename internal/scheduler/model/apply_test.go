package model

import (
	"testing"
)

func pods(names ...string) []Pod {
	out := make([]Pod, len(names))
	for i, n := range names {
		out[i] = Pod{Name: n, Request: Request{GPUs: 1}}
	}
	return out
}

func TestMinIsTheOneGangRule(t *testing.T) {
	tests := []struct {
		name                    string
		minMember, placed, pods int
		want                    int
	}{
		{"a whole gang waits", 4, 0, 6, 4},
		{"members placed count toward the gang", 4, 3, 3, 1},
		{"a gang complete takes the rest one by one", 4, 4, 2, 1},
		{"more placed than the gang", 4, 9, 2, 1},
		{"all pods when minMember is 0", 0, 2, 3, 3},
		{"never more than wait", 8, 0, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := PodGroup{MinMember: tt.minMember, Placed: tt.placed, Pods: make([]Pod, tt.pods)}
			if got := g.Min(); got != tt.want {
				t.Errorf("Min() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	snap := Snapshot{
		Running: []Allocation{
			{Pod: "v-0", Group: "victim", Queue: "q", MinMember: 2, StartedAt: 5, Node: "n"},
			{Pod: "v-1", Group: "victim", Queue: "q", MinMember: 2, StartedAt: 3, Node: "n"},
			{Pod: "w-0", Group: "wide", Queue: "q", MinMember: 3, Node: "n"},
			{Pod: "other", Group: "other", Node: "n"},
		},
		Pending: []PodGroup{
			{Name: "gang", Queue: "q", MinMember: 3, Pods: pods("g-0", "g-1", "g-2", "g-3")},
			{Name: "wide", Queue: "q", MinMember: 3, Placed: 1, Pods: pods("w-1", "w-2")},
			{Name: "lone", Pods: pods("l")},
		},
	}
	d := Decisions{
		Binds: []Bind{{Pod: "g-0", Group: "gang", Node: "n"}, {Pod: "g-1", Group: "gang", Node: "n"}, {Pod: "g-2", Group: "gang", Node: "n"},
			{Pod: "l", Group: "lone", Node: "m", GPUs: []GPUShare{{Index: 1, Milli: 1000}}}},
		Evictions: []Eviction{{Pod: "v-0", Group: "victim"}, {Pod: "v-1", Group: "victim"}, {Pod: "w-0", Group: "wide"}},
	}
	Apply(&snap, &d, 7)

	running := map[string]Allocation{}
	for _, a := range snap.Running {
		running[a.Pod] = a
	}
	for _, p := range []string{"g-0", "g-1", "g-2", "l", "other"} {
		if _, ok := running[p]; !ok {
			t.Errorf("%s is not running", p)
		}
	}
	if len(running) != 5 {
		t.Errorf("running %v, want 5 pods", running)
	}
	if a := running["g-0"]; a.StartedAt != 7 || a.MinMember != 3 || a.Queue != "q" {
		t.Errorf("bound allocation %+v", a)
	}
	if a := running["l"]; a.Node != "m" || len(a.GPUs) != 1 || a.GPUs[0].Index != 1 {
		t.Errorf("bound allocation %+v keeps its node and GPUs", a)
	}
	want := []struct {
		name      string
		pods, min int
	}{
		{"gang", 1, 1},   // 3 of a 3-gang placed: the fourth joins alone
		{"wide", 3, 3},   // its running member evicted: the whole gang again
		{"victim", 2, 2}, // evicted: its declared gang of 2
	}
	if len(snap.Pending) != len(want) {
		t.Fatalf("pending %+v, want %d groups", snap.Pending, len(want))
	}
	for i, w := range want {
		g := snap.Pending[i]
		if g.Name != w.name || len(g.Pods) != w.pods || g.Min() != w.min {
			t.Errorf("pending[%d] = %s with %d pods needing %d, want %s with %d needing %d", i, g.Name, len(g.Pods), g.Min(), w.name, w.pods, w.min)
		}
	}
	if v := snap.Pending[2]; v.CreatedAt != 3 || v.Queue != "q" {
		t.Errorf("re-pended group %+v: want its first start as its age and its queue", v)
	}
}
