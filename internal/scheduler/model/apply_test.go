package model

import (
	"reflect"
	"slices"
	"strings"
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
	nodes := []Node{{Name: "n"}, {Name: "m"}, {Name: "idle"}}
	chunks, err := ByNode(nodes, []Allocation{
		{Pod: "v-0", Group: "victim", Queue: "q", MinMember: 2, StartedAt: 5, Node: "n"},
		{Pod: "v-1", Group: "victim", Queue: "q", MinMember: 2, StartedAt: 3, Node: "n"},
		{Pod: "w-0", Group: "wide", Queue: "q", MinMember: 3, Node: "n"},
		{Pod: "other", Group: "other", Node: "n"},
		{Pod: "stays", Group: "stays", Node: "idle"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// m's chunk has room beyond its length, which Apply must not write.
	spare := []Allocation{{Pod: "x", Group: "x", Node: "m"}, {Pod: "not running"}}
	chunks[1] = spare[:1]
	passed, before, beforeN := chunks, slices.Clone(chunks), slices.Clone(chunks[0])
	snap := Snapshot{
		Nodes:         nodes,
		RunningByNode: chunks,
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
	if err := Apply(&snap, &d, 7); err != nil {
		t.Fatal(err)
	}

	running := map[string]Allocation{}
	for n, chunk := range snap.RunningByNode {
		for _, a := range chunk {
			running[a.Pod] = a
			if a.Node != nodes[n].Name {
				t.Errorf("%s on node %s is in the chunk of %s", a.Pod, a.Node, nodes[n].Name)
			}
		}
	}
	for _, p := range []string{"g-0", "g-1", "g-2", "l", "other", "stays", "x"} {
		if _, ok := running[p]; !ok {
			t.Errorf("%s is not running", p)
		}
	}
	if len(running) != 7 {
		t.Errorf("running %v, want 7 pods", running)
	}
	// The chunk rule: nothing passed is written, the nodes that changed
	// get new slices and the other keeps its own.
	for n := range passed {
		if len(passed[n]) != len(before[n]) || (len(passed[n]) > 0 && &passed[n][0] != &before[n][0]) {
			t.Errorf("Apply wrote into the slice of chunks passed to it: node %s", nodes[n].Name)
		}
	}
	if !reflect.DeepEqual(passed[0], beforeN) || spare[1].Pod != "not running" {
		t.Errorf("Apply wrote into a chunk passed to it: %v, %v", passed[0], spare)
	}
	for n, changed := range []bool{true, true, false} {
		if same := &snap.RunningByNode[n][0] == &passed[n][0]; same == changed {
			t.Errorf("node %s: chunk kept %v, want %v", nodes[n].Name, same, !changed)
		}
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

func TestApplyRefuses(t *testing.T) {
	nodes := []Node{{Name: "n"}}
	tests := []struct {
		name string
		snap Snapshot
		d    Decisions
		want string
	}{
		{"a bind to a node not listed", Snapshot{Nodes: nodes, Pending: []PodGroup{{Name: "g", Pods: pods("p")}}},
			Decisions{Binds: []Bind{{Pod: "p", Group: "g", Node: "gone"}}}, `node "gone"`},
		{"chunks not aligned with nodes", Snapshot{Nodes: nodes, RunningByNode: [][]Allocation{nil, nil}}, Decisions{}, "2 chunks for 1 nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := tc.snap
			err := Apply(&snap, &tc.d, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply: %v, want an error naming %s", err, tc.want)
			}
			if len(snap.Pending) != len(tc.snap.Pending) || len(snap.RunningByNode) != len(tc.snap.RunningByNode) {
				t.Errorf("a refused Apply changed the snapshot: %+v", snap)
			}
		})
	}
}

// A bind found by its node's name when its NodeIndex does not match, as a
// hand-written decision has it, lands on that node.
func TestApplyBindByName(t *testing.T) {
	snap := Snapshot{Nodes: []Node{{Name: "a"}, {Name: "b"}}, Pending: []PodGroup{{Name: "g", Pods: pods("p", "q")}}}
	d := Decisions{Binds: []Bind{{Pod: "p", Group: "g", Node: "b", NodeIndex: 0}, {Pod: "q", Group: "g", Node: "a", NodeIndex: 0}}}
	if err := Apply(&snap, &d, 1); err != nil {
		t.Fatal(err)
	}
	if len(snap.RunningByNode) != 2 || len(snap.RunningByNode[0]) != 1 || snap.RunningByNode[0][0].Pod != "q" ||
		len(snap.RunningByNode[1]) != 1 || snap.RunningByNode[1][0].Pod != "p" {
		t.Fatalf("running %+v, want q on a and p on b", snap.RunningByNode)
	}
}

// A waiting group's members that finished stay counted in Placed, as a
// cluster counts them; its members evicted no longer count, and those
// bound join the count.
func TestApplyKeepsFinishedMembersPlaced(t *testing.T) {
	nodes := []Node{{Name: "n"}}
	chunks, err := ByNode(nodes, []Allocation{{Pod: "e-1", Group: "e", MinMember: 3, Node: "n"}})
	if err != nil {
		t.Fatal(err)
	}
	// e-0 finished and e-1 runs: 2 placed; e-2 and e-3 wait.
	snap := Snapshot{Nodes: nodes, RunningByNode: chunks, Pending: []PodGroup{{Name: "e", MinMember: 3, Placed: 2, Pods: pods("e-2", "e-3")}}}
	if err := Apply(&snap, &Decisions{}, 1); err != nil {
		t.Fatal(err)
	}
	if g := snap.Pending[0]; g.Placed != 2 || g.Min() != 1 {
		t.Fatalf("after an empty cycle: placed %d needing %d, want 2 needing 1", g.Placed, g.Min())
	}
	d := Decisions{Binds: []Bind{{Pod: "e-2", Group: "e", Node: "n"}}, Evictions: []Eviction{{Pod: "e-1", Group: "e"}}}
	if err := Apply(&snap, &d, 2); err != nil {
		t.Fatal(err)
	}
	if g := snap.Pending[0]; g.Placed != 2 || len(g.Pods) != 2 {
		t.Fatalf("after e-2 bound and e-1 evicted: %+v, want 2 placed (e-0 finished, e-2 running) and e-3, e-1 waiting", g)
	}
}
