package adapter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// BenchmarkSnapshotAndCycle measures what one adapter cycle costs before
// any API call: building the snapshot from the cache and running the core,
// on 1,000 nodes x 8 GPUs with 4,000 running and 4,000 pending single-GPU
// pods. The pending pods are placed afresh every iteration (the worst
// case: a scheduler that just started with a backlog).
//
// mapped=true adds a DeviceClass that maps nvidia.com/gpu
// (spec.extendedResourceName, as the chart installs it), so every pending
// pod also gets the device set of its extended-resource claim (dra.Memo);
// mapped=false is the same cluster without it.
func BenchmarkSnapshotAndCycle(b *testing.B) {
	for _, mapped := range []bool{false, true} {
		b.Run(fmt.Sprintf("mapped=%t", mapped), func(b *testing.B) {
			c := newClusterCache("gpuplane-scheduler")
			for i := range 1000 {
				c.upsertNode(build.Node(fmt.Sprintf("n%04d", i)).Resources(rl("nvidia.com/gpu", "8", "cpu", "128", "memory", "1Ti")).Obj())
			}
			if mapped {
				c.upsertClass(mappedClass("gpu.gpuplane.io"))
			}
			for i := range 8000 {
				p := newPod("bench", fmt.Sprintf("p%05d", i)).GPUs(1).Obj()
				p.UID = types.UID(p.Name)
				if i < 4000 {
					p.Spec.NodeName = fmt.Sprintf("n%04d", i/4)
				}
				c.upsertPod(p)
			}
			bld := newBuilder("gpuplane-scheduler", 64, logr.Discard())
			core, err := scheduler.New(scheduler.Config{})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				in := c.snapshot(bld, newRefusals(), time.Unix(0, 0))
				if _, err := core.Cycle(&in.snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCycleAtScale measures a cycle of a scheduler that has caught up:
// nodes x 8 GPUs with 7 of 8 GPUs held by bound pods, and between cycles
// churn pods finishing and as many new ones arriving, which the cycle
// places. Its cost should follow the churn, not the cluster's size. The
// 1% churns (350 of 35,000 pods, 1,400 of 140,000 on 20,000 nodes) are a
// busy cluster's steady state.
func BenchmarkCycleAtScale(b *testing.B) {
	for _, size := range []struct{ nodes, churn int }{{1000, 0}, {1000, 100}, {5000, 0}, {5000, 100}, {5000, 350}, {20000, 0}, {20000, 1400}} {
		nodes, churn := size.nodes, size.churn
		{
			b.Run(fmt.Sprintf("nodes=%d/churn=%d", nodes, churn), func(b *testing.B) {
				c := newClusterCache("gpuplane-scheduler")
				for i := range nodes {
					c.upsertNode(build.Node(fmt.Sprintf("n%05d", i)).Resources(rl("nvidia.com/gpu", "8", "cpu", "128", "memory", "1Ti")).Obj())
				}
				for i := range nodes * 7 {
					p := newPod("bench", fmt.Sprintf("p%06d", i)).GPUs(1).NodeName(fmt.Sprintf("n%05d", i/7)).Obj()
					p.Annotations = map[string]string{GPUsAnnotation: fmt.Sprint(i % 7)}
					c.upsertPod(p)
				}
				a := newBenchAdapter(b)
				cycle := func() { a.cycle(b, c, time.Unix(0, 0), true) }
				cycle()
				cycle()
				next := nodes * 7
				for b.Loop() {
					b.StopTimer()
					for k := range churn {
						old := c.pods[fmt.Sprintf("bench/p%06d", next-nodes*7+k)]
						done := old.pod.DeepCopy()
						done.Status.Phase = "Succeeded"
						c.upsertPod(done)
						c.upsertPod(newPod("bench", fmt.Sprintf("p%06d", next+k)).GPUs(1).Obj())
					}
					next += churn
					b.StartTimer()
					cycle()
				}
			})
		}
	}
}

// BenchmarkSnapshotAndCycleClaims is BenchmarkSnapshotAndCycle with the
// GPUs published in ResourceSlices (1,000 nodes of 8 claim-only GPUs) and
// 4,000 pending pods that each name a one-GPU ResourceClaim, beside 4,000
// bound device-less pods: the snapshot resolves every pod's claim and the
// core places them on the claims' device set. BenchmarkClaimAllocation
// adds what carrying the binds out costs before any API call: the
// structured allocator run for each placed pod on its node.
func BenchmarkSnapshotAndCycleClaims(b *testing.B) {
	c, bld := claimBench(b)
	core, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		in := c.snapshot(bld, newRefusals(), time.Unix(0, 0))
		d, err := core.Cycle(&in.snap)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Binds) != 4000 {
			b.Fatalf("%d binds, want 4000", len(d.Binds))
		}
	}
}

func BenchmarkClaimAllocation(b *testing.B) {
	c, bld := claimBench(b)
	core, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	in := c.snapshot(bld, newRefusals(), time.Unix(0, 0))
	d, err := core.Cycle(&in.snap)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		x := d.Binds[i%len(d.Binds)]
		i++
		pi := c.pods[x.Pod]
		writes, err := c.allocateClaims(ctx, x.Node, x.GPUs, x.Alternative, pi.pod, in.claims[x.Pod])
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.forgetClaims(x.Pod, writes)
		b.StartTimer()
	}
}

func claimBench(b *testing.B) (*clusterCache, *builder) {
	c := newClusterCache("gpuplane-scheduler")
	c.upsertClass(gpuClass("gpu.gpuplane.io"))
	for i := range 1000 {
		name := fmt.Sprintf("n%04d", i)
		c.upsertNode(build.Node(name).Resources(rl("cpu", "128", "memory", "1Ti")).Obj())
		c.upsertSlice(gpuSlice(name, 8, "H100"))
	}
	for i := range 8000 {
		name := fmt.Sprintf("p%05d", i)
		p := newPod("ns", name).Limits(rl("cpu", "1")).Obj()
		if i < 4000 {
			p.Spec.NodeName = fmt.Sprintf("n%04d", i/4)
		} else {
			p.UID = types.UID("uid-" + name)
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}
			c.upsertClaim(gpuClaim(name, "gpu.gpuplane.io", 1))
		}
		c.upsertPod(p)
	}
	return c, newBuilder("gpuplane-scheduler", 64, logr.Discard())
}

// benchAdapter is what an adapter benchmark cycles: a builder and a core,
// as one scheduler replica holds them.
type benchAdapter struct {
	bld  *builder
	core *scheduler.Scheduler
}

func newBenchAdapter(b *testing.B) benchAdapter {
	b.Helper()
	core, err := scheduler.New(scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return benchAdapter{bld: newBuilder("gpuplane-scheduler", 64, logr.Discard()), core: core}
}

// cycle snapshots c at now and runs the core on it; with assume, it
// records the binds in c as the binder does before they land.
func (a benchAdapter) cycle(b *testing.B, c *clusterCache, now time.Time, assume bool) model.Decisions {
	b.Helper()
	in := c.snapshot(a.bld, newRefusals(), now)
	d, err := a.core.Cycle(&in.snap)
	if err != nil {
		b.Fatal(err)
	}
	if assume {
		c.mu.Lock()
		for _, bd := range d.Binds {
			c.assume(bd.Pod, assumption{node: bd.Node, shares: bd.GPUs})
		}
		c.mu.Unlock()
	}
	return d
}

// BenchmarkSpreadFirstCycle is scheduler_perf's PreferredTopologySpreading
// (and, with spread=DoNotSchedule, TopologySpreading) as a just-started
// scheduler's first cycle sees it: 500 nodes of 4 CPUs over three zones,
// 1,000 bound pods of 100m CPU and 500Mi, and 1,000 waiting pods labelled
// color=blue that spread over zones with maxSkew 5. spread=none is the
// same pods without the constraint. It reports the process's CPU per
// cycle, snapshot and core together.
func BenchmarkSpreadFirstCycle(b *testing.B) {
	for _, spread := range []string{"none", string(corev1.ScheduleAnyway), string(corev1.DoNotSchedule)} {
		b.Run("spread="+spread, func(b *testing.B) {
			c := newClusterCache("gpuplane-scheduler")
			zones := []string{"moon-1", "moon-2", "moon-3"}
			for i := range 500 {
				name := fmt.Sprintf("node-%03d", i)
				n := build.Node(name).Label("kubernetes.io/hostname", name).Label(corev1.LabelTopologyZone, zones[i%3]).
					Resources(rl("cpu", "4", "memory", "32Gi", "pods", "110")).Obj()
				n.ResourceVersion = "1"
				c.upsertNode(slimNode(n))
			}
			for i := range 2000 {
				p := newPod("bench", fmt.Sprintf("p%05d", i)).Obj()
				p.Spec.Containers[0].Resources.Requests = rl("cpu", "100m", "memory", "500Mi")
				p.UID = types.UID(p.Name)
				p.CreationTimestamp = metav1.Unix(int64(i), 0)
				if i < 1000 {
					p.Spec.NodeName = fmt.Sprintf("node-%03d", i%500)
				} else {
					p.Labels = map[string]string{"color": "blue"}
					if spread != "none" {
						p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 5, TopologyKey: corev1.LabelTopologyZone,
							WhenUnsatisfiable: corev1.UnsatisfiableConstraintAction(spread),
							LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"color": "blue"}}}}
					}
				}
				c.upsertPod(slimPod(p))
			}
			var cpu time.Duration
			for b.Loop() {
				before := processCPU(b)
				d := newBenchAdapter(b).cycle(b, c, time.Unix(5000, 0), false)
				cpu += processCPU(b) - before
				if len(d.Binds) != 1000 {
					b.Fatalf("%d binds, want the 1,000 waiting pods placed", len(d.Binds))
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
