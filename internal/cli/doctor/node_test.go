package doctor

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

func TestNodeQuarantine(t *testing.T) {
	node := func(reason string, tainted bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1"}}
		n.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: gpunode.ConditionGPUReady, Status: corev1.ConditionTrue, Message: "8 GPUs offered"},
		}
		if reason != "" {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: gpunode.ConditionGPUQuarantine, Status: corev1.ConditionTrue,
				Reason: reason, Message: "GPU 3 (GPU-3): XID 79 (bus), held: reset failed"})
		}
		if tainted {
			n.Spec.Taints = []corev1.Taint{{Key: gpunode.TaintGPUFault, Value: "xid-79", Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	tests := []struct {
		name   string
		node   *corev1.Node
		result string
		fix    string
	}{
		{"held and tainted", node(gpunode.ReasonGPUHeld, true), Fail, "nvidia-smi --gpu-reset -i INDEX"},
		{"a GPU-scoped quarantine", node(gpunode.ReasonGPUQuarantined, false), Warn, "kubectl describe node gpu-node-1"},
		{"none", node("", false), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &doctor{client: fake.NewClientset(tc.node)}
			r := d.node(context.Background(), tc.node)
			var got *Check
			for i, c := range r.Checks {
				if c.Name == "quarantine" {
					got = &r.Checks[i]
				}
				if c.Name == "taints" && strings.Contains(c.Detail, gpunode.TaintGPUFault) {
					t.Errorf("the quarantine's taint is also reported as a plain taint: %+v", c)
				}
			}
			if tc.result == "" {
				if got != nil {
					t.Fatalf("quarantine check %+v on a node without one", got)
				}
				return
			}
			if got == nil || got.Result != tc.result || !strings.Contains(got.Detail, "GPU 3 (GPU-3)") || !strings.Contains(got.Fix, tc.fix) {
				t.Fatalf("quarantine check = %+v, want %s with fix %q", got, tc.result, tc.fix)
			}
		})
	}
}
