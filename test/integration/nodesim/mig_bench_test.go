package nodesim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkMIGLabelToAllocatable measures, on a simulated DGX H100 whose
// real agent runs declarative MIG, the time from a change of the Node's
// nvidia.com/mig.config label to the Node's allocatable showing the new
// MIG devices: the agent's watch, plan, the layout applied through the
// simulated driver, the device plugin re-registering with the node's
// kubelet and the kubelet's node status. The node runs no pods, so no
// eviction is timed. one-gpu changes GPU 3 alone (gpuplane's way);
// all-gpus changes all eight, as a node-wide reconfiguration does.
// Each iteration goes there and back: two reconfigurations.
func BenchmarkMIGLabelToAllocatable(b *testing.B) {
	for _, bc := range []struct {
		name, there    string
		gpus, migThere int64
	}{
		{name: "one-gpu", there: "gpu3-3g", gpus: 7, migThere: 2},
		{name: "all-gpus", there: "all-3g", gpus: 0, migThere: 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodeName := "sim-h100-migbench-" + bc.name
			ns := env.CreateNamespace(b)
			migNode(b, nodeName, ns)
			waitCapacity(b, nodeName, map[string]int64{gpuRes: 8})
			b.ResetTimer()
			for range b.N {
				labelMIG(b, nodeName, bc.there)
				waitAllocatable(b, nodeName, map[string]int64{gpuRes: bc.gpus, mig3g: bc.migThere})
				labelMIG(b, nodeName, "all-disabled")
				waitAllocatable(b, nodeName, map[string]int64{gpuRes: 8, mig3g: 0})
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(2*b.N), "s/reconfiguration")
		})
	}
}

// waitAllocatable polls the Node every 5ms (a loopback API server) until
// its allocatable has want; a resource at 0 may also be absent.
func waitAllocatable(b *testing.B, node string, want map[string]int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last corev1.ResourceList
	for ctx.Err() == nil {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			last = n.Status.Allocatable
			ok := true
			for r, v := range want {
				q := n.Status.Allocatable[corev1.ResourceName(r)]
				ok = ok && q.Value() == v
			}
			if ok {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("node %s allocatable %v, want %v", node, last, fmt.Sprint(want))
}

// BenchmarkMIGPodsDisturbed measures what a reconfiguration costs the
// node's pods: before each, a one-GPU pod runs on every GPU of the DGX
// H100; the label changes; when the new devices are allocatable, the pods
// evicted are counted. one-gpu changes GPU 3 alone; all-gpus changes all
// eight, as a node-wide reconfiguration (drain, then mig-manager) does.
// The time includes the evictions; setting the pods up and putting the
// node back are not timed.
func BenchmarkMIGPodsDisturbed(b *testing.B) {
	for _, bc := range []struct {
		name, there    string
		gpus, migThere int64
	}{
		{name: "one-gpu", there: "gpu3-3g", gpus: 7, migThere: 2},
		{name: "all-gpus", there: "all-3g", gpus: 0, migThere: 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodeName := "sim-h100-migpods-" + bc.name
			ns := env.CreateNamespace(b)
			migNode(b, nodeName, ns)
			waitCapacity(b, nodeName, map[string]int64{gpuRes: 8})
			evicted := 0
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				names := make([]string, 8)
				for g := range 8 {
					names[g] = fmt.Sprintf("p%d-%d", i, g)
					pod := framework.Pod(ns, names[g]).GPUs(1).NodeName(nodeName).Obj()
					if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				for _, n := range names {
					env.WaitPodPhase(b, ns, n, corev1.PodRunning, time.Minute)
				}
				b.StartTimer()
				labelMIG(b, nodeName, bc.there)
				waitAllocatable(b, nodeName, map[string]int64{gpuRes: bc.gpus, mig3g: bc.migThere})
				b.StopTimer()
				for _, n := range names {
					p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
					if apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
						evicted++
					}
				}
				zero := int64(0)
				if err := env.Client.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
					b.Fatal(err)
				}
				framework.Eventually(b, time.Minute, "the pods gone", func(ctx context.Context) (bool, error) {
					list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
					return err == nil && len(list.Items) == 0, err
				})
				labelMIG(b, nodeName, "all-disabled")
				waitAllocatable(b, nodeName, map[string]int64{gpuRes: 8, mig3g: 0})
				b.StartTimer()
			}
			b.ReportMetric(float64(evicted)/float64(b.N), "pods-evicted/op")
			b.ReportMetric(float64(8*b.N-evicted)/float64(b.N), "pods-untouched/op")
		})
	}
}
