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
