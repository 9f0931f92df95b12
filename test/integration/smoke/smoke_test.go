package smoke_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

func TestGPUNodesAndPods(t *testing.T) {
	ns := env.CreateNamespace(t)
	selector := "smoke=" + ns
	var nodes []*corev1.Node
	for i := range 10 {
		nodes = append(nodes, framework.GPUNode(fmt.Sprintf("%s-gpu-%d", ns, i)).GPUs(8).Label("smoke", ns).Obj())
	}
	if err := env.CreateNodes(t.Context(), nodes, 10); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), selector); err != nil {
			t.Error(err)
		}
	})
	env.WaitNodesReady(t, selector, len(nodes), 30*time.Second)

	t.Run("capacity is kept", func(t *testing.T) {
		n, err := env.Client.CoreV1().Nodes().Get(t.Context(), nodes[3].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			if got := list[framework.ResourceGPU]; got.Value() != 8 {
				t.Errorf("%s = %s, want 8", framework.ResourceGPU, got.String())
			}
		}
	})

	tests := []struct {
		name      string
		pod       *corev1.Pod
		wantPhase corev1.PodPhase
	}{
		{
			name:      "a 1-GPU pod bound to a node runs",
			pod:       framework.Pod(ns, "one-gpu").GPUs(1).NodeName(nodes[0].Name).Obj(),
			wantPhase: corev1.PodRunning,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), tc.pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating pod: %v", err)
			}
			env.WaitPodPhase(t, ns, tc.pod.Name, tc.wantPhase, 30*time.Second)
			p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), tc.pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.ServiceAccountName != "default" {
				t.Errorf("pod runs as ServiceAccount %q, want default (admission did not run?)", p.Spec.ServiceAccountName)
			}
			if p.Status.PodIP == "" {
				t.Error("running pod has no IP")
			}
		})
	}

	t.Run("a Job's pod is created and completes", func(t *testing.T) {
		// The controller-manager makes the pod; kwok's stages complete pods
		// that a Job owns.
		tmpl := framework.Pod(ns, "").GPUs(4).NodeName(nodes[1].Name).RestartPolicy(corev1.RestartPolicyNever).Obj()
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "train"}},
				Spec:       tmpl.Spec,
			}},
		}
		if _, err := env.Client.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating job: %v", err)
		}
		framework.Eventually(t, 30*time.Second, "job train succeeded", func(ctx context.Context) (bool, error) {
			j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "train", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return j.Status.Succeeded == 1, fmt.Errorf("job status: %d active, %d succeeded, %d failed", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
		})
	})
}

func TestUnmanagedNodeStaysNotReady(t *testing.T) {
	// A node without kwok's annotation is somebody else's to run (the GPU
	// node simulator's); kwok must leave it alone.
	name := env.CreateNamespace(t) + "-unmanaged"
	node := framework.UnmanagedGPUNode(name).Obj()
	if _, err := env.Client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// A managed node made alongside shows that kwok had the chance to act.
	managed := framework.GPUNode(name + "-managed").Obj()
	if _, err := env.Client.CoreV1().Nodes().Create(t.Context(), managed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Nodes().Delete(context.Background(), managed.Name, metav1.DeleteOptions{})
	})
	env.WaitNodesReady(t, "kubernetes.io/hostname="+managed.Name, 1, 30*time.Second)
	n, err := env.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if framework.NodeReady(n) {
		t.Error("kwok made a node Ready that is not annotated for it")
	}
}
