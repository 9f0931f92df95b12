package scheduler_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// A node that Karpenter marks for disruption gives every pod of the gangs
// on it (and only those) the PreemptionNotice condition, then evicts
// them: the gang goes back whole, and, recreated as its workload would,
// is placed whole again on the other nodes, never on the one going away.
func TestDisruptedNodeRequeuesItsGangWhole(t *testing.T) {
	nodes := gpuNodes(4, "spot")
	c := newCluster(t, nodes...)
	c.run(adapter.Config{})
	c.podGroup("train", 2, "")
	member := func(i int) *framework.PodBuilder {
		return c.pod(fmt.Sprint("train-", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "train").Label("gang", "train")
	}
	c.create(member(0), member(1), c.pod("solo").GPUs(8).Label("solo", "y"))
	c.waitBound("gang=train", 2, 30*time.Second)
	c.waitBound("solo=y", 1, 30*time.Second)
	p, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), "train-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone := p.Spec.NodeName
	c.alwaysPods("solo, on another node, keeps running without notice", "solo=y", func(ps map[string]*corev1.Pod) error {
		for _, p := range ps {
			if p.DeletionTimestamp != nil || notice(p) != nil {
				return fmt.Errorf("pod %s was given notice or evicted", p.Name)
			}
		}
		return nil
	})

	taint := []byte(`{"spec":{"taints":[{"key":"karpenter.sh/disrupted","effect":"NoSchedule"}]}}`)
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), gone, types.StrategicMergePatchType, taint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every member gets notice first, then goes: the one on the node and
	// the one elsewhere. A watch sees each notice, however soon the pod
	// is gone after it.
	var mu sync.Mutex
	seen := map[string]string{}
	c.alwaysPods("(records the notices)", "gang=train", func(ps map[string]*corev1.Pod) error {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps {
			if n := notice(p); n != nil && p.DeletionTimestamp == nil {
				seen[p.Name] = n.Reason + ": " + n.Message
			}
		}
		return nil
	})
	framework.Eventually(t, 30*time.Second, "both members given notice, then evicted", func(ctx context.Context) (bool, error) {
		c.failIfBroken()
		ps, err := c.pods(ctx, "gang=train")
		if err != nil {
			return false, err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, name := range []string{"train-0", "train-1"} {
			if _, ok := seen[name]; !ok {
				return false, fmt.Errorf("no notice on %s seen yet (seen %v)", name, seen)
			}
			if p := ps[name]; p != nil && p.DeletionTimestamp == nil {
				return false, fmt.Errorf("%s not evicted yet", name)
			}
		}
		return true, nil
	})
	mu.Lock()
	got := maps.Clone(seen)
	mu.Unlock()
	for name, n := range got {
		t.Logf("%s: %s", name, n)
	}
	if want := fmt.Sprintf("NodeDisruption: gpuplane-scheduler evicts this pod: node %s is going away (taint karpenter.sh/disrupted)", gone); len(got["train-0"]) < len(want) || got["train-0"][:len(want)] != want {
		t.Errorf("train-0's notice %q, want it to begin %q", got["train-0"], want)
	}
	framework.Eventually(t, 30*time.Second, "the evicted members gone", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"train-0", "train-1"} {
			_, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				return false, fmt.Errorf("%s still there", name)
			}
			if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})

	// Its workload makes the members again: the gang is placed whole on
	// the two nodes left free, not on the one going away.
	c.create(member(0), member(1))
	c.waitBound("gang=train", 2, 30*time.Second)
	ps, err := c.pods(t.Context(), "gang=train")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Spec.NodeName == gone {
			t.Errorf("%s bound to %s, which is going away", p.Name, gone)
		}
	}
}

// notice returns the pod's PreemptionNotice condition when it is True.
func notice(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; string(c.Type) == v1alpha1.ConditionPreemptionNotice && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}
