package placement

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// A cordoned node refuses a request unless the request tolerates the
// cordon's taint, as kube-scheduler's NodeUnschedulable lets a pod that
// tolerates node.kubernetes.io/unschedulable onto it.
func TestCordonedNodeTakesWhatToleratesIt(t *testing.T) {
	n := gpuNode("cordoned", 8000, 2)
	n.Unschedulable = true
	st := NewState([]model.Node{n})
	for _, tc := range []struct {
		name string
		tols []model.Toleration
		want string
	}{
		{"no toleration", nil, FilterUnschedulable},
		{"another taint's", []model.Toleration{{Key: "dedicated", Exists: true}}, FilterUnschedulable},
		{"the cordon's", []model.Toleration{{Key: model.TaintUnschedulable, Exists: true}}, ""},
		{"every taint", []model.Toleration{{Exists: true}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &model.Request{MilliCPU: 1000, GPUs: 1, Tolerations: tc.tols}
			if got := st.Why(0, req); got != tc.want {
				t.Errorf("Why = %q, want %q", got, tc.want)
			}
			if fits := StaticFits(&n, req); fits != (tc.want == "") {
				t.Errorf("StaticFits = %v, want %v", fits, tc.want == "")
			}
			if opts := st.Options(0, req); (opts != nil) != (tc.want == "") {
				t.Errorf("Options = %v, want some: %v", opts, tc.want == "")
			}
		})
	}
}

// A closed node takes nothing until Open, whatever frees on it, while
// the pods there can still be released and held again; a placer neither
// picks it nor lets it hide the open nodes that look just like it.
func TestClosedNodeTakesNothingUntilOpen(t *testing.T) {
	nodes := []model.Node{gpuNode("a", 8000, 2), gpuNode("b", 8000, 2)}
	st := NewState(nodes)
	p := bestFitPlacer(t, st)
	req := &model.Request{MilliCPU: 1000, GPUs: 1}
	running := []model.GPUShare{{Index: 0, Milli: model.MilliPerGPU}}
	if err := st.Hold(0, req, running); err != nil {
		t.Fatal(err)
	}
	if o, ok := p.Place(req); !ok || o.Node != 0 {
		t.Fatalf("open: placed %+v (%v), want the fuller node a", o, ok)
	}
	st.Close(0)
	mark := st.Checkpoint()
	st.Release(0, req, running) // a what-if frees the running pod
	if o, ok := p.Place(req); !ok || o.Node != 1 {
		t.Fatalf("a closed: placed %+v (%v), want b", o, ok)
	}
	if st.Options(0, req) != nil || st.Fits(0, req, running) || st.Assign(0, req, running) == nil || st.Hosts(0, req) {
		t.Fatal("closed node a offers room")
	}
	if got := st.Why(0, req); got != FilterKept {
		t.Fatalf("Why = %q, want %q", got, FilterKept)
	}
	if got := st.RoomFreed(0, req, 0, 0, nil); got != 0 {
		t.Fatalf("RoomFreed = %d on a closed node, want 0", got)
	}
	if err := st.Hold(0, req, running); err != nil {
		t.Fatalf("putting the running pod back on a closed node: %v", err)
	}
	st.Rollback(mark)
	if !st.Closed(0) {
		t.Fatal("Rollback opened the node")
	}
	// b, like a, has one GPU free and looks alike to the placer's memo.
	if err := st.Assign(1, req, running); err != nil {
		t.Fatal(err)
	}
	if o, ok := p.Place(req); !ok || o.Node != 1 {
		t.Fatalf("a closed, b like a: placed %+v (%v), want b", o, ok)
	}
	st.Open()
	if st.Closed(0) || st.Why(0, req) != "" {
		t.Fatalf("after Open: closed %v, Why %q", st.Closed(0), st.Why(0, req))
	}
	if o, ok := p.Place(req); !ok || o.Node != 0 {
		t.Fatalf("after Open: placed %+v (%v), want a again (equal, lower index)", o, ok)
	}
}
