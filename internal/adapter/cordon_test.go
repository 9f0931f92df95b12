package adapter

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// A pod that tolerates the cordon's taint may go to a cordoned node, as
// kube-scheduler's NodeUnschedulable lets it; any other may not. The
// differential test against kube-scheduler found gpuplane refusing it.
func TestCordonedNodeTakesPodsThatTolerateIt(t *testing.T) {
	cordon := corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name string
		tols []corev1.Toleration
		want bool
	}{
		{"no toleration", nil, false},
		{"the cordon's taint", []corev1.Toleration{cordon}, true},
		{"the cordon's taint, any effect", []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}}, true},
		{"every taint", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, true},
		{"the cordon's key for NoExecute only", []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}, false},
		{"another taint", []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := build.Node("n").CPU("8").Memory("16Gi").Pods(110).GPUs(2).Obj()
			node.Spec.Unschedulable = true
			pb := build.Pod("ns", "p").SchedulerName(v1alpha1.SchedulerName).GPUs(1)
			for _, tol := range tc.tols {
				pb.Toleration(tol)
			}
			v, err := ViewOf(v1alpha1.SchedulerName, []runtime.Object{node, pb.Obj()}, time.Unix(100, 0))
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Snapshot.Pending) != 1 {
				t.Fatalf("pending groups %+v, held %v; want the pod's", v.Snapshot.Pending, v.Held)
			}
			req := &v.Snapshot.Pending[0].Pods[0].Request
			st := placement.NewState(v.Snapshot.Nodes)
			if got := st.Why(0, req) == ""; got != tc.want {
				t.Errorf("feasible on the cordoned node = %v (%q), want %v", got, st.Why(0, req), tc.want)
			}
			if got := slices.Equal(req.Tolerations, []model.Toleration{{Key: model.TaintUnschedulable, Exists: true}}); got != tc.want {
				t.Errorf("request tolerations %+v", req.Tolerations)
			}
		})
	}
}
