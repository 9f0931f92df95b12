package status

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// A pod that gpuplane's gate holds shows why the scheduler says it waits;
// one another controller gates shows that gate.
func TestWaitingPodsSayWhy(t *testing.T) {
	pod := func(name string, gates []string, reason, msg string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
		for _, g := range gates {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
		}
		if reason != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: msg}}
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("quota", []string{v1alpha1.SchedulingGate}, "QueueLimit", `queue "a" is at its limit`),
		pod("new", []string{v1alpha1.SchedulingGate}, corev1.PodReasonSchedulingGated, "Scheduling is blocked due to non-empty scheduling gates"),
		pod("theirs", []string{v1alpha1.SchedulingGate, "example.com/wait"}, "QueueLimit", `queue "a" is at its limit`),
		pod("room", nil, corev1.PodReasonUnschedulable, "0/1 nodes available"),
	}
	want := map[string]string{
		"quota":  `queue "a" is at its limit`,
		"new":    "not seen by the scheduler yet",
		"theirs": "scheduling gates: example.com/wait",
		"room":   "0/1 nodes available",
	}
	got := WaitingPods(pods, v1alpha1.SchedulerName)
	if len(got) != len(want) {
		t.Fatalf("%d rows %+v, want %d", len(got), got, len(want))
	}
	for _, g := range got {
		if g.Why != want[g.Name] {
			t.Errorf("%s: why %q, want %q", g.Name, g.Why, want[g.Name])
		}
	}
}
