package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// gang creates a PodGroup and its pods, each asking for gpus GPUs.
func (c *cluster) gang(name string, pods int, minMember int32, gpus int) {
	c.t.Helper()
	c.podGroup(name, minMember, "")
	for i := range pods {
		c.create(c.pod(fmt.Sprintf("%s-%d", name, i)).GPUs(gpus).Label(v1alpha1.PodGroupLabel, name).Label("gang", name))
	}
}

func TestGangAllOrNothing(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "gang")...)
	c.run(adapter.Config{})

	// 16 GPUs: the first gang takes 12, the second (12 more) cannot fit
	// and must not take the 4 that are left.
	c.gang("first", 3, 3, 4)
	c.waitBound("gang=first", 3, 30*time.Second)
	c.gang("second", 3, 3, 4)
	msg := c.waitCondition("second-0", corev1.PodReasonUnschedulable, "gang 1/3 placeable", 30*time.Second)
	t.Logf("why second waits: %s", msg)
	if n, _, err := c.bound(t.Context(), "gang=second"); err != nil || n != 0 {
		t.Fatalf("second gang has %d pods bound (err %v), want 0: a gang is placed whole or not at all", n, err)
	}
	framework.Eventually(t, 20*time.Second, "PodGroup status", func(ctx context.Context) (bool, error) {
		first, err := c.getPodGroup(ctx, "first")
		if err != nil {
			return false, err
		}
		second, err := c.getPodGroup(ctx, "second")
		if err != nil {
			return false, err
		}
		ok := (first.Status.Phase == v1alpha1.PodGroupRunning || first.Status.Phase == v1alpha1.PodGroupScheduled) && first.Status.Scheduled == 3 &&
			second.Status.Phase == v1alpha1.PodGroupPending && len(second.Status.Conditions) == 1 && second.Status.Conditions[0].Status == "False"
		return ok, fmt.Errorf("first %s/%d, second %s %v", first.Status.Phase, first.Status.Scheduled, second.Status.Phase, second.Status.Conditions)
	})

	t.Run("the placed gang's placement is on record", func(t *testing.T) {
		pg, err := c.getPodGroup(t.Context(), "first")
		if err != nil {
			t.Fatal(err)
		}
		ps, err := c.pods(t.Context(), "gang=first")
		if err != nil {
			t.Fatal(err)
		}
		if len(pg.Status.Placement) != 3 {
			t.Fatalf("placement has %d members, want 3: %+v", len(pg.Status.Placement), pg.Status.Placement)
		}
		for _, m := range pg.Status.Placement {
			p := ps[m.Pod]
			if p == nil || string(p.UID) != m.UID || p.Spec.NodeName != m.Node || p.Annotations[adapter.GPUsAnnotation] != m.GPUs {
				t.Errorf("record %+v does not match the pod", m)
			}
		}
	})

	// When the first gang goes away, the second fits whole.
	if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(t.Context(), deleteNow(), listBy("gang=first")); err != nil {
		t.Fatal(err)
	}
	c.waitBound("gang=second", 3, 30*time.Second)
}

func TestTwoGangsThatCannotBothFitNeverDeadlock(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "deadlock")...)
	// Both gangs exist, interleaved, before the scheduler starts: each
	// alone fits (12 of 16 GPUs), both do not.
	c.podGroup("a", 3, "")
	c.podGroup("b", 3, "")
	for i := range 3 {
		c.create(c.pod(fmt.Sprintf("a-%d", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "a").Label("gang", "a"))
		c.create(c.pod(fmt.Sprintf("b-%d", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "b").Label("gang", "b"))
	}
	c.run(adapter.Config{})
	var winner, loser string
	framework.Eventually(t, 30*time.Second, "one gang placed whole", func(ctx context.Context) (bool, error) {
		na, _, err := c.bound(ctx, "gang=a")
		if err != nil {
			return false, err
		}
		nb, _, err := c.bound(ctx, "gang=b")
		if err != nil {
			return false, err
		}
		switch {
		case na == 3 && nb == 0:
			winner, loser = "a", "b"
			return true, nil
		case nb == 3 && na == 0:
			winner, loser = "b", "a"
			return true, nil
		}
		return false, fmt.Errorf("a has %d bound, b has %d", na, nb)
	})
	c.waitCondition(loser+"-0", corev1.PodReasonUnschedulable, "gang 1/3 placeable", 30*time.Second)
	if n, _, err := c.bound(t.Context(), "gang="+loser); err != nil || n != 0 {
		t.Fatalf("gang %s has %d pods bound after %s won (err %v): half-placed", loser, n, winner, err)
	}
	if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(t.Context(), deleteNow(), listBy("gang="+winner)); err != nil {
		t.Fatal(err)
	}
	c.waitBound("gang="+loser, 3, 30*time.Second)
}

func pollPodGroupPhase(t *testing.T, c *cluster, name string, want v1alpha1.PodGroupPhase) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "PodGroup "+name+" "+string(want), func(ctx context.Context) (bool, error) {
		pg, err := c.getPodGroup(ctx, name)
		if err != nil {
			return false, err
		}
		return pg.Status.Phase == want, fmt.Errorf("phase %q", pg.Status.Phase)
	})
}
