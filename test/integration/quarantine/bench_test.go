package quarantine_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// BenchmarkXIDToTaint measures, on the real agent of a simulated DGX H100
// against the real API server, the time from an XID 79 injected into the
// running agent (its loopback fault control) to a watch of the Node seeing
// the gpuplane.io/gpu-fault taint, and, as the peer in the same run, to the
// Node's allocatable dropping by the GPU (the device plugin's health path
// through the kubelet, here the node simulator). Each iteration fails the
// next GPU and waits until the quarantine has returned it (validation 0s,
// window 0s) before the next. It reports the medians.
func BenchmarkXIDToTaint(b *testing.B) {
	n := startNode(b, "q-bench", `version: v1
health:
  quarantine:
    window: 0s
    validation: 0s
    evictionTimeout: 10s
    validationTimeout: 30s
`)
	n.waitQuarantine(b, 60*time.Second, false, gpunode.ReasonNoGPUQuarantined)
	var toTaint, toAllocatable []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		node, err := n.get(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		w, err := env.Client.CoreV1().Nodes().Watch(b.Context(), metav1.ListOptions{
			FieldSelector: "metadata.name=" + n.name, ResourceVersion: node.ResourceVersion})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		n.fault(b, fmt.Sprintf("/xid?gpu=%d&xid=79", i%8))
		var tainted, dropped time.Duration
		deadline := time.After(60 * time.Second)
		for tainted == 0 || dropped == 0 {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatal("the Node watch ended")
				}
				if ev.Type != watch.Modified {
					continue
				}
				nd := ev.Object.(*corev1.Node)
				if _, has := taint(nd); has && tainted == 0 {
					tainted = time.Since(start)
				}
				if a := nd.Status.Allocatable[gpunode.ResourceGPU]; a.Value() == 7 && dropped == 0 {
					dropped = time.Since(start)
				}
			case <-deadline:
				b.Fatalf("iteration %d: no taint (%v) or allocatable drop (%v) within 60s", i, tainted, dropped)
			}
		}
		b.StopTimer()
		w.Stop()
		toTaint, toAllocatable = append(toTaint, tainted), append(toAllocatable, dropped)
		n.waitQuarantine(b, 60*time.Second, false, gpunode.ReasonNoGPUQuarantined)
		n.waitGPUs(b, 8, 8)
		b.StartTimer()
	}
	b.StopTimer()
	mt, ma := median(toTaint), median(toAllocatable)
	b.ReportMetric(float64(mt.Microseconds())/1000, "ms-xid-to-taint-median")
	b.ReportMetric(float64(ma.Microseconds())/1000, "ms-xid-to-allocatable-median")
	b.ReportMetric(float64(mt)/float64(ma), "taint/allocatable")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
