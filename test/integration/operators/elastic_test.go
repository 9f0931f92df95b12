package operators_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// An elastic PyTorchJob gangs at elasticPolicy.minReplicas: it starts as
// soon as its minimum fits, and its other workers join as room appears.
func TestElasticPyTorchJobGrows(t *testing.T) {
	c := newCluster(t, 2) // 2 nodes x 8 GPUs: two 6-GPU workers fit
	startTrainingOperator(t)
	c.runScheduler()
	spec := c.podSpec(6)
	spec["containers"].([]any)[0].(map[string]any)["name"] = "pytorch"
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": "elastic", "namespace": c.ns},
		"spec": map[string]any{
			"elasticPolicy": map[string]any{"minReplicas": int64(2), "maxReplicas": int64(4), "rdzvBackend": "c10d"},
			"pytorchReplicaSpecs": map[string]any{"Worker": map[string]any{"replicas": int64(4), "restartPolicy": "Never",
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"ptj": "elastic"}}, "spec": spec}}},
		},
	}}
	if _, err := c.dyn.Resource(pyTorchJobs).Namespace(c.ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "the elastic job started at its minimum", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "ptj=elastic")
		return err == nil && n == 2 && total == 4, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
	// Room appears: two more nodes. The waiting workers join.
	var nodes []*corev1.Node
	for range 2 {
		nodes = append(nodes, framework.GPUNode(fmt.Sprintf("op-%d", nodeSeq.Add(1))).GPUs(8).Label("test-ns", c.ns).Obj())
	}
	if err := env.CreateNodes(t.Context(), nodes, 2); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "the elastic job grown to all four workers", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "ptj=elastic")
		return err == nil && n == 4, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
}
