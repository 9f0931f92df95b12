package adapter

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// backlogCluster is the scale benchmark's cluster (test/integration/
// schedulerscale, start=backlog) in a cache: nodes as kwok's, with their
// labels and an allocatable pod count, and nodes x 8 pending single-GPU
// pods of one namespace, each through the informers' transform as the
// scheduler receives it. Nothing about them asks for affinity, spread,
// volumes, ports or claims: the pods the scale benchmark measures.
func backlogCluster(nodes int) *clusterCache {
	c := newClusterCache("gpuplane-scheduler")
	for i := range nodes {
		name := fmt.Sprintf("scale-%05d", i)
		n := build.Node(name).Label("kubernetes.io/hostname", name).Label("kubernetes.io/os", "linux").
			Label("kubernetes.io/arch", "amd64").Label("type", "kwok").Label("bench", "scale").
			CPU("128").Memory("2Ti").Pods(110).Product("NVIDIA-H100-80GB-HBM3", 81559).GPUs(8).Obj()
		n.ResourceVersion = "1"
		c.upsertNode(slimNode(n))
	}
	for i := range nodes * 8 {
		p := newPod("scale-bench", fmt.Sprintf("p%05d", i)).GPUs(1).Toleration(corev1.Toleration{
			Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}).Obj()
		p.UID = types.UID(p.Name)
		p.CreationTimestamp = metav1.Unix(int64(i/100), 0)
		c.upsertPod(slimPod(p))
	}
	return c
}

// BenchmarkBacklogAtScale is the adapter and the core through the scale
// benchmark's backlog round, in process: 5,000 nodes x 8 GPUs and 40,000
// waiting single-GPU pods.
//
//   - phase=first: a scheduler that just started builds its first
//     snapshot and places the whole backlog (what comes before its first
//     bind, informer sync aside).
//   - phase=bind: after that cycle, its binds arrive: each iteration the
//     cache sees 5 more pods bound where the core put them, and a cycle
//     runs with nothing left to place (what the scheduler does for the
//     rest of the round, a cycle per batch of binds). With relabel=true,
//     every 50th iteration one node's labels change first (a labeller at
//     work, say), so the adapter converts its node list again.
func BenchmarkBacklogAtScale(b *testing.B) {
	const nodes = 5000
	b.Run("phase=first", func(b *testing.B) {
		c := backlogCluster(nodes)
		var cpu time.Duration
		for b.Loop() {
			before := processCPU(b)
			d := newBenchAdapter(b).cycle(b, c, time.Unix(1000, 0), false)
			cpu += processCPU(b) - before
			if len(d.Binds) != nodes*8 {
				b.Fatalf("%d binds, want %d", len(d.Binds), nodes*8)
			}
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	for _, relabel := range []bool{false, true} {
		b.Run(fmt.Sprintf("phase=bind/relabel=%t", relabel), func(b *testing.B) { benchBinds(b, nodes, relabel) })
	}
}

// benchBinds is BenchmarkBacklogAtScale's bind phase.
func benchBinds(b *testing.B, nodes int, relabel bool) {
	c := backlogCluster(nodes)
	a := newBenchAdapter(b)
	binds := a.cycle(b, c, time.Unix(1000, 0), true).Binds
	const batch, relabelEvery = 5, 50
	next, it := 0, 0
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		if next+batch > len(binds) {
			b.Fatalf("ran out of binds after %d iterations; the benchmark needs -benchtime of at most %d x", next/batch, len(binds)/batch)
		}
		for _, bd := range binds[next : next+batch] {
			p := c.pods[bd.Pod].pod.DeepCopy()
			p.Spec.NodeName = bd.Node
			p.Annotations = map[string]string{GPUsAnnotation: fmt.Sprint(bd.GPUs[0].Index)}
			p.ResourceVersion = "2"
			c.upsertPod(slimPod(p))
		}
		next += batch
		if it++; relabel && it%relabelEvery == 0 {
			// A node's labels change now and then (a labeller's
			// heartbeat, say): the node list is converted afresh.
			n := c.nodes[fmt.Sprintf("scale-%05d", it/relabelEvery%nodes)].node.DeepCopy()
			n.Labels["gpuplane.io/bench-tick"] = fmt.Sprint(it)
			n.ResourceVersion = fmt.Sprint(it)
			c.upsertNode(slimNode(n))
		}
		before := processCPU(b)
		b.StartTimer()
		a.cycle(b, c, time.Unix(1000, 0), false)
		b.StopTimer()
		cpu += processCPU(b) - before
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used so far, every thread's
// (the collector's included): on a machine shared with other work, a
// benchmark's wall time also counts the time it waited for a core.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
