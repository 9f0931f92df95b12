package nodesim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkAdmitBatch measures how fast a simulated node admits pods
// through the real agent: each iteration creates 64 one-GPU pods at once
// on a DGX H100 time-sliced 16 ways (128 devices), bound to the node, and
// waits until all are Running with an allocation (GetPreferredAllocation,
// Allocate, annotation, status). Deleting them is not timed.
func BenchmarkAdmitBatch(b *testing.B) {
	const nodeName, batch = "sim-h100-bench", 64
	node(b, nodeName, "dgxh100", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 16\n")
	waitCapacity(b, nodeName, map[string]int64{gpuRes: 128})
	ns := env.CreateNamespace(b)
	b.ResetTimer()
	for i := range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, batch)
		for j := range batch {
			wg.Go(func() {
				pod := framework.Pod(ns, fmt.Sprintf("p%d-%d", i, j)).GPUs(1).NodeName(nodeName).Obj()
				if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		framework.Eventually(b, 2*time.Minute, "a batch Running", func(ctx context.Context) (bool, error) {
			list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			running := 0
			for k := range list.Items {
				if list.Items[k].Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == batch, fmt.Errorf("%d of %d Running", running, batch)
		})
		b.StopTimer()
		if err := env.Client.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
		framework.Eventually(b, 2*time.Minute, "the batch deleted", func(ctx context.Context) (bool, error) {
			list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 0, err
		})
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pods/s")
}
