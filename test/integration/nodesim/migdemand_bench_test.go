package nodesim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkMIGDemandToRunning measures, on a simulated DGX H100 running
// the real agent with seven whole-GPU pods and one idle GPU, with the
// real gpuplane-scheduler, the time from creating a pod that asks
// nvidia.com/mig-1g.10gb to the pod Running. "via-proposal": no GPU
// offers the profile, so the scheduler proposes a layout for the idle GPU
// (mig-demand-min-wait 1ms), the agent re-partitions it and the pod is
// bound to the new devices; between iterations the GPU is turned whole
// again. "layout-in-place", the peer measured in the same run: the idle
// GPU already offers the profile, so the pod is bound at once.
func BenchmarkMIGDemandToRunning(b *testing.B) {
	for _, bc := range []struct {
		name     string
		inPlace  bool
		nodeName string
	}{
		{name: "via-proposal", nodeName: "sim-h100-demandbench"},
		{name: "layout-in-place", inPlace: true, nodeName: "sim-h100-inplacebench"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ns := env.CreateNamespace(b)
			migNode(b, bc.nodeName, ns)
			waitCapacity(b, bc.nodeName, map[string]int64{gpuRes: 8})
			runGPUplaneScheduler(b, adapter.Config{MIGDemandMinWait: time.Millisecond, MIGLayoutDwell: time.Millisecond, MIGProposalTimeout: time.Minute})
			for i := range 7 {
				pod := framework.Pod(ns, fmt.Sprintf("w%d", i)).GPUs(1).SchedulerName("gpuplane-scheduler").Obj()
				if _, err := env.Client.CoreV1().Pods(ns).Create(b.Context(), pod, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				env.WaitPodPhase(b, ns, pod.Name, corev1.PodRunning, time.Minute)
			}
			idle := idleGPU(b, bc.nodeName)
			setProposal(b, bc.nodeName, idle, bc.inPlace)
			if bc.inPlace {
				waitAllocatable(b, bc.nodeName, map[string]int64{mig1g: 7})
			}
			labelNode(b, bc.nodeName, gpunode.LabelMIGLayoutPolicy, gpunode.MIGLayoutFollowDemand)
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("mig-%d", i)
				pod := framework.Pod(ns, name).Limit(mig1g, "1").SchedulerName("gpuplane-scheduler").Obj()
				if _, err := env.Client.CoreV1().Pods(ns).Create(b.Context(), pod, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				env.WaitPodPhase(b, ns, name, corev1.PodRunning, 2*time.Minute)
				b.StopTimer()
				zero := int64(0)
				if err := env.Client.CoreV1().Pods(ns).Delete(b.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
					b.Fatal(err)
				}
				waitPodGone(b, ns, name)
				if !bc.inPlace {
					// Whole again, as it was, for the next pod's proposal.
					setProposal(b, bc.nodeName, idle, false)
					waitAllocatable(b, bc.nodeName, map[string]int64{gpuRes: 8, mig1g: 0})
				}
				b.StartTimer()
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/pod")
		})
	}
}

// idleGPU is the GPU no pod of the node holds, by the agent's layout
// annotation and the whole-GPU pods' allocations.
func idleGPU(b *testing.B, node string) int {
	b.Helper()
	pods, err := env.Client.CoreV1().Pods("").List(b.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		b.Fatal(err)
	}
	held := map[string]bool{}
	for _, p := range pods.Items {
		if s := p.Annotations[adapter.GPUsAnnotation]; s != "" {
			held[s] = true
		}
	}
	for g := range 8 {
		if !held[fmt.Sprint(g)] {
			return g
		}
	}
	b.Fatalf("no idle GPU on %s: %v", node, held)
	return -1
}

// setProposal writes the node's proposal for GPU g: 7x1g.10gb, or whole.
func setProposal(b *testing.B, node string, g int, mig bool) {
	b.Helper()
	p := gpunode.MIGProposal{V: 1, GPUs: []gpunode.MIGProposalGPU{{Index: g, MIG: mig, At: time.Now().UnixMilli()}}}
	if mig {
		p.GPUs[0].Devices = map[string]int{"1g.10gb": 7}
	}
	v, _ := json.Marshal(p)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{gpunode.LabelMIGLayoutPolicy: gpunode.MIGLayoutFollowDemand},
		"annotations": map[string]string{gpunode.MIGProposalAnnotation: string(v)}}})
	if _, err := env.Client.CoreV1().Nodes().Patch(b.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
}

func waitPodGone(b *testing.B, ns, name string) {
	b.Helper()
	framework.Eventually(b, time.Minute, "pod "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
}
