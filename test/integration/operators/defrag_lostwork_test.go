package operators_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// bigPastBound waits until a-0 and b-0, which report no checkpoint, are
// older than bound (a second more, for the API's whole-second
// timestamps), then creates an 8-GPU pod, big, that did not opt in to
// moves. It returns a-0's and b-0's UIDs.
func (c *cluster) bigPastBound(bound time.Duration) (uidA, uidB string) {
	t := c.t
	t.Helper()
	framework.Eventually(t, 2*bound, "a-0 and b-0 older than "+bound.String(), func(ctx context.Context) (bool, error) {
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
	_, uidA, _ = c.podOn(t.Context(), "a-0")
	_, uidB, _ = c.podOn(t.Context(), "b-0")
	big := framework.Pod(c.ns, "big").SchedulerName(c.scheduler).GPUs(8).NodeSelector("test-ns", c.ns).Obj()
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return uidA, uidB
}

// checkpoint has pod report a checkpoint now, as a job or its sidecar
// does: the annotation scheduling.gpuplane.io/last-checkpoint.
func (c *cluster) checkpoint(pod string) {
	c.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.LastCheckpointAnnotation: time.Now().UTC().Format(time.RFC3339)}}})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods(c.ns).Patch(c.t.Context(), pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

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
	// creation), with no checkpoint reported; then big comes.
	uidA, uidB := c.bigPastBound(bound)
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
	c.checkpoint("a-0")
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

// With --defrag-max-lost-work and drains, a node kept for an 8-GPU pod
// that holds two movable workloads, neither within the bound of a
// checkpoint, is emptied one workload at a time as each checkpoints: a
// goes as soon as it reports one, while the pod still waits for b and is
// told so; when b reports one it goes too, and the pod binds in the node
// they left.
func TestDrainMovesEachWorkloadOnceItCheckpoints(t *testing.T) {
	const bound = 20 * time.Second
	c := newCluster(t, 3)
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, DefragMovesPerHour: 4, DefragDrainAfter: 2 * time.Second, DefragMaxLostWork: bound})
	// a (3 GPUs) lands first; the other two nodes are then filled to 2
	// GPUs free each (4 that stay, 2 that go), so b (3 GPUs) can only
	// join a; then the 2 that go leave: 2 GPUs free beside a and b, 4 on
	// each other node, none whole.
	c.statefulSet("a", 3)
	kept, _, others := c.landed("a-0")
	for k, n := range others {
		c.gpuPod(fmt.Sprintf("fixed-%d", k), n, 4)
		c.gpuPod(fmt.Sprintf("filler-%d", k), n, 2)
	}
	c.statefulSet("b", 3)
	framework.Eventually(t, 60*time.Second, "b bound beside a", func(ctx context.Context) (bool, error) {
		n, _, err := c.podOn(ctx, "b-0")
		return err == nil && n == kept, fmt.Errorf("b on %q (%w): %s", n, err, c.waiting(ctx, "app!=none"))
	})
	for k := range others {
		c.remove(fmt.Sprintf("filler-%d", k))
	}
	uidA, uidB := c.bigPastBound(bound)
	bigSays := func(says string) {
		t.Helper()
		framework.Eventually(t, 60*time.Second, "big told "+says, func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, "big", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("big bound on %s while a workload on %s had yet to checkpoint", p.Spec.NodeName, kept)
			}
			got := framework.SchedulerSays(p)
			return strings.Contains(got, says), fmt.Errorf("big: %s", got)
		})
	}
	bigSays("node " + kept + " is kept free for it: it waits for the movable pods there (6 GPUs) to be moved off, 6 GPUs of them once they checkpoint")
	// a checkpoints: it is moved off ahead of b, for big, which waits on.
	c.checkpoint("a-0")
	framework.Eventually(t, 60*time.Second, "a made again off "+kept, func(ctx context.Context) (bool, error) {
		n, u, err := c.podOn(ctx, "a-0")
		return err == nil && u != uidA && n != "" && n != kept, fmt.Errorf("a-0 (%s) on %q (%w)", u, n, err)
	})
	c.movedFor("a-0", "pod/"+c.ns+"/big")
	bigSays("node " + kept + " is kept free for it: it waits for the movable pods there (3 GPUs) to be moved off, 3 GPUs of them once they checkpoint")
	if _, u, err := c.podOn(t.Context(), "b-0"); err != nil || u != uidB {
		t.Fatalf("b-0 was made again (uid %s, was %s; %v) before it reported a checkpoint", u, uidB, err)
	}
	// b checkpoints: it goes too, and big binds where both ran.
	c.checkpoint("b-0")
	framework.Eventually(t, 60*time.Second, "big bound on "+kept+", b made again elsewhere", func(ctx context.Context) (bool, error) {
		nBig, _, errBig := c.podOn(ctx, "big")
		nb, ub, errB := c.podOn(ctx, "b-0")
		if err := errors.Join(errBig, errB); err != nil {
			return false, err
		}
		return nBig == kept && ub != uidB && nb != "" && nb != kept, fmt.Errorf("big on %q, b-0 (%s) on %q: %s", nBig, ub, nb, c.waiting(ctx, "app!=none"))
	})
}
