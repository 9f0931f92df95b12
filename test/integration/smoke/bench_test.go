package smoke_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkKwokGPUNodes measures creating GPU nodes concurrently through
// client-go until kwok has made every one of them Ready.
func BenchmarkKwokGPUNodes(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			benchmarkKwokGPUNodes(b, n, 64)
		})
	}
}

func benchmarkKwokGPUNodes(b *testing.B, count, parallel int) {
	round := 0
	for b.Loop() {
		round++
		b.StopTimer()
		label := fmt.Sprintf("bench-%d-%d", count, round)
		nodes := make([]*corev1.Node, count)
		for i := range nodes {
			nodes[i] = framework.GPUNode(fmt.Sprintf("%s-%04d", label, i)).Label("bench", label).Obj()
		}
		selector := "bench=" + label
		b.StartTimer()

		if err := env.CreateNodes(b.Context(), nodes, parallel); err != nil {
			b.Fatal(err)
		}
		env.WaitNodesReady(b, selector, count, 2*time.Minute)

		b.StopTimer()
		if err := env.DeleteNodes(context.Background(), selector); err != nil {
			b.Fatal(err)
		}
		framework.Eventually(b, 2*time.Minute, "benchmark nodes deleted", func(ctx context.Context) (bool, error) {
			list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
			if err != nil {
				return false, err
			}
			return len(list.Items) == 0, fmt.Errorf("%d nodes left", len(list.Items))
		})
		b.StartTimer()
	}
	b.ReportMetric(float64(count)*float64(b.N)/b.Elapsed().Seconds(), "nodes/s")
}
