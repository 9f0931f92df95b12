package localcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

func TestSchedulerPlacesGPUPods(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.Scheduler = true
	env, err := framework.NewEnv(framework.StartControlPlane(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	ns := env.CreateNamespace(t)
	small := framework.GPUNode("small").GPUs(2).Label("pool", "gpu").Obj()
	large := framework.GPUNode("large").GPUs(8).Label("pool", "gpu").Obj()
	if err := env.CreateNodes(t.Context(), []*corev1.Node{small, large}, 2); err != nil {
		t.Fatal(err)
	}
	env.WaitNodesReady(t, "pool=gpu", 2, 30*time.Second)

	tests := []struct {
		name     string
		gpus     int
		wantNode string // "" means unschedulable
	}{
		{name: "fits only the large node", gpus: 4, wantNode: "large"},
		{name: "fits no node", gpus: 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("gpus-%d", tc.gpus)
			pod := framework.Pod(ns, name).GPUs(tc.gpus).Obj()
			if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.wantNode != "" {
				env.WaitPodPhase(t, ns, name, corev1.PodRunning, 30*time.Second)
				got, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got.Spec.NodeName != tc.wantNode {
					t.Errorf("pod placed on %q, want %q", got.Spec.NodeName, tc.wantNode)
				}
				return
			}
			framework.Eventually(t, 30*time.Second, "pod reported unschedulable", func(ctx context.Context) (bool, error) {
				got, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				for _, c := range got.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
						return got.Spec.NodeName == "", fmt.Errorf("unschedulable yet bound to %q", got.Spec.NodeName)
					}
				}
				return false, fmt.Errorf("conditions %v", got.Status.Conditions)
			})
		})
	}
}
