package scheduler_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/simulator"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// outcome is what a run decided, in names both drivers share: where each
// pod runs (node index in name order, GPUs as the annotation writes them)
// and which pods were evicted.
type outcome struct {
	placed  map[string]string // pod -> "node#i gpus"
	evicted []string
}

// equivalenceTrace is the scenario as gpuplane simulate reads it: two
// nodes like the framework's kwok GPU nodes, one queue, four pods of four
// GPUs of rising priority that fill the nodes one cycle after another (as
// the test creates them on the cluster), then an urgent one.
const equivalenceTrace = `
nodes:
- {name: eq, count: 2, milliCPU: 128000, memoryMiB: 2097152, gpus: 8, gpuModel: NVIDIA-H100-80GB-HBM3, gpuMemoryMiB: 81559}
queues:
- {name: team, noPreemption: %v}
pods:
- {name: fill-0, queue: team, gpus: 4, priority: 10, createdAt: 0}
- {name: fill-1, queue: team, gpus: 4, priority: 11, createdAt: 60}
- {name: fill-2, queue: team, gpus: 4, priority: 12, createdAt: 120}
- {name: fill-3, queue: team, gpus: 4, priority: 13, createdAt: 180}
- {name: urgent, queue: team, gpus: 4, priority: 100, createdAt: 600}
`

// TestSimulatorAndSchedulerDecideAlike drives gpuplane simulate's event
// mode and gpuplane-scheduler on a real API server from one scenario, with
// the queue's preemption policy both ways, and compares what they decided:
// the same pods on the same nodes and GPUs, the same victims, or none. In
// the "slow-victim" run the evicted pod takes its time to exit (a finalizer
// holds it): the preemptor waits, unbound, with the core's
// WaitingForPreemption reason, and binds where the simulator put it once
// the victim is gone.
func TestSimulatorAndSchedulerDecideAlike(t *testing.T) {
	for _, tc := range []struct {
		name        string
		never, slow bool
	}{{name: "preemption-allowed"}, {name: "preemption-never", never: true}, {name: "slow-victim", slow: true}} {
		t.Run(tc.name, func(t *testing.T) {
			sim := simulate(t, tc.never)
			k8s := schedule(t, tc.never, tc.slow)
			if !maps.Equal(sim.placed, k8s.placed) || !slices.Equal(sim.evicted, k8s.evicted) {
				t.Fatalf("the simulator and the scheduler disagree:\nsimulator: %v, evicted %v\nscheduler: %v, evicted %v", sim.placed, sim.evicted, k8s.placed, k8s.evicted)
			}
			if !tc.never && len(sim.evicted) != 1 {
				t.Errorf("evicted %v, want one pod to make room for urgent", sim.evicted)
			}
			if tc.never && len(sim.evicted) != 0 {
				t.Errorf("evicted %v though the queue forbids preemption", sim.evicted)
			}
		})
	}
}

func simulate(t *testing.T, never bool) outcome {
	tr, err := simulator.ReadYAMLTrace("equivalence", strings.NewReader(fmt.Sprintf(equivalenceTrace, never)))
	if err != nil {
		t.Fatal(err)
	}
	out := outcome{placed: map[string]string{}}
	index := map[string]int{}
	for i, n := range tr.Nodes {
		index[n.Name] = i
	}
	_, err = simulator.RunEvent(t.Context(), tr, simulator.EventConfig{Policy: "gpuplane", Seed: 1,
		OnCycle: func(_ int64, _ *model.Snapshot, d *model.Decisions) {
			for _, e := range d.Evictions {
				out.evicted = append(out.evicted, e.Pod)
				delete(out.placed, e.Pod)
			}
			for _, b := range d.Binds {
				out.placed[b.Pod] = fmt.Sprintf("node#%d %s", index[b.Node], gpusOf(b.GPUs))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out.evicted)
	return out
}

// gpusOf renders shares as the scheduler's annotation does.
func gpusOf(shares []model.GPUShare) string {
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = fmt.Sprint(s.Index)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// holdFinalizer keeps an evicted pod terminating until the test lets it go.
const holdFinalizer = "test.gpuplane.io/hold"

func schedule(t *testing.T, never, slow bool) outcome {
	prefix := fmt.Sprintf("eq%d", nodeSeq.Add(1))
	nodes := []*framework.NodeBuilder{framework.GPUNode(prefix + "-0").GPUs(8), framework.GPUNode(prefix + "-1").GPUs(8)}
	c := newCluster(t, nodes...)
	q := "team-" + c.ns
	c.queue(q, "", 0, 0)
	if never {
		c.forbidPreemption(q)
	}
	classes := map[string]int32{}
	for i := range 4 {
		classes[fmt.Sprintf("eq-%s-%d", c.ns, i)] = int32(10 + i)
	}
	classes["eq-"+c.ns+"-urgent"] = 100
	priorityClasses(t, classes)
	c.run(adapter.Config{})
	for i := range 4 {
		p := c.pod(fmt.Sprintf("fill-%d", i)).GPUs(4).Label(v1alpha1.QueueLabel, q).Label("wave", "fill").Obj()
		p.Spec.PriorityClassName = fmt.Sprintf("eq-%s-%d", c.ns, i)
		if slow {
			p.Finalizers = []string{holdFinalizer}
			t.Cleanup(func() { releaseFinalizer(c, p.Name) })
		}
		c.createPod(p)
		// One at a time, as the simulator's trace has them in order.
		c.waitBound("wave=fill", i+1, 30*time.Second)
	}
	p := c.pod("urgent").GPUs(4).Label(v1alpha1.QueueLabel, q).Obj()
	p.Spec.PriorityClassName = "eq-" + c.ns + "-urgent"
	c.createPod(p)
	switch {
	case never:
		c.waitCondition("urgent", corev1.PodReasonUnschedulable, "spec.preemption: Never", 30*time.Second)
	case slow:
		c.waitCondition("urgent", model.UnplacedWaitingForVictims, "evicted", 30*time.Second)
		// The condition and the eviction are written by different workers:
		// the victim turns terminating shortly after, not necessarily before.
		var victim string
		framework.Eventually(t, 30*time.Second, "a terminating victim", func(ctx context.Context) (bool, error) {
			ps, err := c.pods(ctx, "")
			if err != nil {
				return false, err
			}
			if deleting := beingDeleted(ps); len(deleting) > 0 {
				victim = deleting[0]
			}
			if u := ps["urgent"]; u != nil && u.Spec.NodeName != "" {
				node := u.Spec.NodeName
				t.Fatalf("urgent bound to %s while its victim %q still holds the GPUs", node, victim)
			}
			return victim != "", nil
		})
		releaseFinalizer(c, victim)
		c.waitBound("", 4, 60*time.Second)
	default:
		c.waitBound("", 4, 60*time.Second)
	}
	out := outcome{placed: map[string]string{}}
	index := map[string]int{nodes[0].Obj().Name: 0, nodes[1].Obj().Name: 1}
	framework.Eventually(t, 30*time.Second, "a settled outcome", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "")
		if err != nil {
			return false, err
		}
		clear(out.placed)
		out.evicted = out.evicted[:0]
		for _, name := range []string{"fill-0", "fill-1", "fill-2", "fill-3", "urgent"} {
			p := ps[name]
			switch {
			case p == nil || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed:
				if name != "urgent" {
					out.evicted = append(out.evicted, name)
				}
			case p.Spec.NodeName != "":
				out.placed[name] = fmt.Sprintf("node#%d %s", index[p.Spec.NodeName], p.Annotations[gpupod.GPUsAnnotation])
			}
		}
		if never {
			return len(out.placed) == 4, fmt.Errorf("%d placed", len(out.placed))
		}
		return len(out.placed) == 4 && len(out.evicted) == 1, fmt.Errorf("%d placed, evicted %v", len(out.placed), out.evicted)
	})
	return out
}

// releaseFinalizer lets a pod held by holdFinalizer go.
func releaseFinalizer(c *cluster, name string) {
	c.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, err := env.Client.CoreV1().Pods(c.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Errorf("releasing pod %s: %v", name, err)
	}
}
