package model

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
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

func TestByNode(t *testing.T) {
	nodes := []Node{{Name: "x"}, {Name: "y"}, {Name: "z"}}
	got, err := ByNode(nodes, []Allocation{{Pod: "a", Node: "z"}, {Pod: "b", Node: "x"}, {Pod: "c", Node: "z"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[0]) != 1 || got[0][0].Pod != "b" || got[1] != nil || len(got[2]) != 2 || got[2][0].Pod != "a" || got[2][1].Pod != "c" {
		t.Fatalf("ByNode = %+v, want b on x, nothing on y, a then c on z", got)
	}
	if got, err := ByNode(nodes, nil); got != nil || err != nil {
		t.Fatalf("ByNode of nothing = %v, %v, want nil, nil", got, err)
	}
	if _, err := ByNode(nodes, []Allocation{{Pod: "a", Node: "w"}}); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("ByNode with an unknown node: %v, want an error naming it", err)
	}
}

// Snapshots written with one "running" array read into RunningByNode.
func TestSnapshotJSON(t *testing.T) {
	nodes := `"nodes": [{"name": "x", "milliCPU": 1000, "memoryMiB": 1}, {"name": "y", "milliCPU": 1000, "memoryMiB": 1}]`
	pods := func(s *Snapshot) [][]string {
		out := make([][]string, len(s.RunningByNode))
		for n, chunk := range s.RunningByNode {
			for _, a := range chunk {
				out[n] = append(out[n], a.Pod)
			}
		}
		return out
	}
	tests := []struct {
		name    string
		js      string
		want    [][]string
		wantErr string
	}{
		{"by node", `{` + nodes + `, "runningByNode": [[{"pod": "a", "node": "x"}], []]}`, [][]string{{"a"}, nil}, ""},
		{"one array, as written before", `{` + nodes + `, "running": [{"pod": "a", "node": "y"}, {"pod": "b", "node": "x"}, {"pod": "c", "node": "y"}]}`,
			[][]string{{"b"}, {"a", "c"}}, ""},
		{"nothing running", `{` + nodes + `, "now": 5}`, [][]string{}, ""},
		{"both forms", `{` + nodes + `, "running": [{"pod": "a", "node": "y"}], "runningByNode": [[], []]}`, nil, "set one or the other"},
		{"an unknown node", `{` + nodes + `, "running": [{"pod": "a", "node": "w"}]}`, nil, `node "w"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s Snapshot
			err := json.Unmarshal([]byte(tc.js), &s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Unmarshal: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pods(&s); fmt.Sprint(got) != fmt.Sprint(tc.want) || len(s.Nodes) != 2 {
				t.Fatalf("running by node %v on %d nodes, want %v on 2", got, len(s.Nodes), tc.want)
			}
		})
	}
	// What is written reads back the same.
	in := Snapshot{Nodes: []Node{{Name: "x"}}, RunningByNode: [][]Allocation{{{Pod: "a", Node: "x"}}}, Now: 7}
	b, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip %s: %+v, want %+v", b, out, in)
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
