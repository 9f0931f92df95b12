package adapter

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// gated is a pending pod of ours that gpuplane's admission gated.
func gated(b *build.PodBuilder) *corev1.Pod {
	p := b.Obj()
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGate}}
	return p
}

// lifted is p as the API server has it once its gate is lifted.
func lifted(p *corev1.Pod) *corev1.Pod {
	out := p.DeepCopy()
	out.Spec.SchedulingGates = slices.DeleteFunc(out.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.SchedulingGate })
	out.ResourceVersion += "1"
	return out
}

// Only a pod that more nodes would start is released from its gate and
// called Unschedulable; one its queue's quota, or its gang's missing pods,
// hold back keeps its gate and says why, and is released by its bind once
// the reason is gone.
func TestGatesFollowTheCore(t *testing.T) {
	t.Run("capacity-short: released, then Unschedulable", func(t *testing.T) {
		f := newLoopFixture(t, Config{}, gpuNode("a", 4))
		p := gated(newPod("ns", "big").GPUs(8))
		f.cache.upsertPod(p)
		f.cycle()
		if !slices.Equal(f.api.ungated, []string{"ns/big"}) {
			t.Fatalf("ungated %v, want ns/big released for capacity", f.api.ungated)
		}
		if c, ok := f.status.conditions["ns/big"]; ok {
			t.Fatalf("condition %q written while the pod is gated: an autoscaler would read a gated pod as unschedulable", c)
		}
		// Until the request lands, it is not sent again.
		f.cycle()
		if len(f.api.ungated) != 1 {
			t.Fatalf("ungated %v, want one request while the first is in flight", f.api.ungated)
		}
		f.cache.upsertPod(lifted(p))
		f.cycle()
		if c := f.status.conditions["ns/big"]; !strings.HasPrefix(c, corev1.PodReasonUnschedulable+": ") || !strings.Contains(c, "insufficient nvidia.com/gpu") {
			t.Fatalf("condition %q, want Unschedulable with the nodes' reasons", c)
		}
	})
	t.Run("a lost request is sent again", func(t *testing.T) {
		f := newLoopFixture(t, Config{}, gpuNode("a", 4))
		f.cache.upsertPod(gated(newPod("ns", "big").GPUs(8)))
		f.cycle()
		f.now = f.now.Add(ungateRetry)
		f.cycle()
		if !slices.Equal(f.api.ungated, []string{"ns/big", "ns/big"}) {
			t.Fatalf("ungated %v, want the request sent again after %v", f.api.ungated, ungateRetry)
		}
	})
	t.Run("quota-blocked: stays gated, bound when the quota frees", func(t *testing.T) {
		f := newLoopFixture(t, Config{}, gpuNode("a", 8))
		f.cache.upsertQueue(build.Queue("capped").GPUs("", "2").Obj())
		first := newPod("ns", "first").GPUs(2).Label(v1alpha1.QueueLabel, "capped").Obj()
		first.Spec.NodeName = "a"
		f.cache.upsertPod(first)
		waiting := gated(newPod("ns", "second").GPUs(1).Label(v1alpha1.QueueLabel, "capped"))
		f.cache.upsertPod(waiting)
		f.cycle()
		if len(f.api.ungated) != 0 || len(f.api.binds) != 0 {
			t.Fatalf("ungated %v, bound %v; want the quota-blocked pod held at its gate", f.api.ungated, f.api.binds)
		}
		if c := f.status.conditions["ns/second"]; !strings.HasPrefix(c, "QueueLimit: ") || !strings.Contains(c, `queue "capped" is at its limit`) {
			t.Fatalf("condition %q, want QueueLimit naming the queue", c)
		}
		done := first.DeepCopy()
		done.Status.Phase = corev1.PodSucceeded
		f.cache.upsertPod(done)
		f.cycle()
		if !slices.Equal(f.api.ungated, []string{"ns/second bind"}) || len(f.api.binds) != 1 {
			t.Fatalf("ungated %v, bound %v; want the pod's gate lifted by its bind", f.api.ungated, f.api.binds)
		}
	})
	t.Run("a gang missing a member: every member stays gated, counted; bound whole once it arrives", func(t *testing.T) {
		f := newLoopFixture(t, Config{}, gpuNode("a", 8))
		f.cache.upsertPodGroup(podGroup("train", 3))
		for _, n := range []string{"train-0", "train-1"} {
			f.cache.upsertPod(gated(newPod("ns", n).GPUs(1).Label(v1alpha1.PodGroupLabel, "train")))
		}
		f.cycle()
		if len(f.api.ungated) != 0 || len(f.api.binds) != 0 {
			t.Fatalf("ungated %v, bound %v; want the gang held at its gates", f.api.ungated, f.api.binds)
		}
		if c := f.status.conditions["ns/train-0"]; !strings.HasPrefix(c, "NotEnoughPods: ") || !strings.Contains(c, "needs minMember 3 pods but has 2") {
			t.Fatalf("condition %q, want NotEnoughPods counting the two gated members", c)
		}
		f.cache.upsertPod(gated(newPod("ns", "train-2").GPUs(1).Label(v1alpha1.PodGroupLabel, "train")))
		f.cycle()
		slices.Sort(f.api.ungated)
		if want := []string{"ns/train-0 bind", "ns/train-1 bind", "ns/train-2 bind"}; !slices.Equal(f.api.ungated, want) || len(f.api.binds) != 3 {
			t.Fatalf("ungated %v, bound %v; want the whole gang bound, each gate lifted by its bind", f.api.ungated, f.api.binds)
		}
	})
	t.Run("a restarted scheduler releases what the core now says waits for capacity", func(t *testing.T) {
		f := newLoopFixture(t, Config{}, gpuNode("a", 4))
		f.cache.upsertPod(gated(newPod("ns", "big").GPUs(8)))
		f.cycle()
		// The leader dies before its request lands; its successor starts
		// from the cache alone.
		next, err := newLoop(Config{}.Defaults(), f.loop.log, f.cache, f.api, f.status, newMetrics())
		if err != nil {
			t.Fatal(err)
		}
		f.loop = next
		f.cycle()
		if !slices.Equal(f.api.ungated, []string{"ns/big", "ns/big"}) {
			t.Fatalf("ungated %v, want the successor to release the pod again", f.api.ungated)
		}
	})
	t.Run("another controller's gate: not ours to lift", func(t *testing.T) {
		f := newLoopFixture(t, Config{}, gpuNode("a", 4))
		p := newPod("ns", "theirs").GPUs(8).Obj()
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGate}, {Name: "example.com/wait"}}
		f.cache.upsertPod(p)
		f.cycle()
		if len(f.api.ungated) != 0 {
			t.Fatalf("ungated %v, want nothing while another controller gates the pod", f.api.ungated)
		}
	})
}
