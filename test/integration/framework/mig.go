package framework

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// MIGState reads what a node's agent says of its MIG layout: the
// nvidia.com/mig.config.state label and the MIG condition (nil when the
// node has none).
func MIGState(ctx context.Context, c kubernetes.Interface, node string) (string, *corev1.NodeCondition, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	var cond *corev1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == gpunode.ConditionMIGConfig {
			cond = &n.Status.Conditions[i]
		}
	}
	return n.Labels[gpunode.LabelMIGConfigState], cond, nil
}
