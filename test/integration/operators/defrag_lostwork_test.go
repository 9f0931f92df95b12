package operators_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// With --defrag-max-lost-work, the fragmented cluster of
// TestDefragmentationMovesAWorkload stays as it is while both movable
// workloads are further than the bound from their start and have reported
// no checkpoint: the 8-GPU pod waits. Once a reports a checkpoint, a alone
// may move, and it is a that moves beside b, which stays.
func TestDefragmentationMovesOnlyFreshlyCheckpointedWork(t *testing.T) {
	const bound = 20 * time.Second
	c := newCluster(t, 2)
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, DefragMovesPerHour: 4, DefragMaxLostWork: bound})
	nodeA, nodeB := c.fragment()
	// Both workloads run past the bound from their start (a pod's
	// creation), with no checkpoint reported.
	framework.Eventually(t, 2*bound, "a and b older than the bound", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"a-0", "b-0"} {
			p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if age := time.Since(p.CreationTimestamp.Time); age <= bound+time.Second {
				return false, fmt.Errorf("%s is %v old", name, age.Round(time.Second))
			}
		}
		return true, nil
	})
	_, uidA, _ := c.podOn(t.Context(), "a-0")
	_, uidB, _ := c.podOn(t.Context(), "b-0")
	big := framework.Pod(c.ns, "big").SchedulerName(c.scheduler).GPUs(8).NodeSelector("test-ns", c.ns).Obj()
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cycle that finds big without room would have moved a workload
	// had the bound not held it: big is said to wait instead.
	framework.Eventually(t, 60*time.Second, "big said to wait", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("big bound on %s: a workload was moved although neither was within %v of a checkpoint", p.Spec.NodeName, bound)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				return true, nil
			}
		}
		return false, fmt.Errorf("%s; big on %q", c.waiting(ctx, "app!=none"), p.Spec.NodeName)
	})
	for name, uid := range map[string]string{"a-0": uidA, "b-0": uidB} {
		if _, u, err := c.podOn(t.Context(), name); err != nil || u != uid {
			t.Fatalf("%s was made again (uid %s, was %s; %v) although no workload was within %v of a checkpoint", name, u, uid, err, bound)
		}
	}
	// a checkpoints now: within the bound, it may move.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.LastCheckpointAnnotation: time.Now().UTC().Format(time.RFC3339)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods(c.ns).Patch(t.Context(), "a-0", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "a moved beside b, big bound where a ran", func(ctx context.Context) (bool, error) {
		nBig, _, err := c.podOn(ctx, "big")
		if err != nil || nBig == "" {
			return false, fmt.Errorf("big on %q: %s (%w)", nBig, c.waiting(ctx, "app!=none"), err)
		}
		na, ua, errA := c.podOn(ctx, "a-0")
		nb, ub, errB := c.podOn(ctx, "b-0")
		if errA != nil || errB != nil {
			return false, errors.Join(errA, errB)
		}
		if ub != uidB || nb != nodeB {
			t.Fatalf("b was moved (on %s, uid %s; was %s, %s): it reported no checkpoint", nb, ub, nodeB, uidB)
		}
		return ua != uidA && na == nodeB && nBig == nodeA, fmt.Errorf("a on %q (made again: %t), big on %s", na, ua != uidA, nBig)
	})
}
