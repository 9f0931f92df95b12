package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestHostPortsPinnedToOneNode: two pods binding host port 7777 and
// pinned to one node, as kube-scheduler's NodePorts keeps them: one is
// bound, the other waits with a condition naming the port, and is bound
// once the first is gone.
func TestHostPortsPinnedToOneNode(t *testing.T) {
	nodes := gpuNodes(2, "ports")
	target := nodes[0].Obj().Name
	c := newCluster(t, nodes...)
	c.run(adapter.Config{})
	c.alwaysPods("at most one pod of port 7777 bound", "app=web", atMostBound(1))
	for _, name := range []string{"web-a", "web-b"} {
		c.create(c.pod(name).Label("app", "web").HostPort(7777).NodeSelector("kubernetes.io/hostname", target))
	}
	c.waitBound("app=web", 1, 30*time.Second)
	ps, err := c.pods(t.Context(), "app=web")
	if err != nil {
		t.Fatal(err)
	}
	bound, waiting := "web-a", "web-b"
	if ps["web-b"].Spec.NodeName != "" {
		bound, waiting = waiting, bound
	}
	if got := ps[bound].Spec.NodeName; got != target {
		t.Fatalf("%s bound to %s, want %s", bound, got, target)
	}
	c.waitCondition(waiting, corev1.PodReasonUnschedulable, "host port TCP/0.0.0.0:7777 in use", 30*time.Second)
	if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), bound, deleteNow()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, waiting+" bound once the port is free", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, waiting, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Spec.NodeName == target, fmt.Errorf("node %q", p.Spec.NodeName)
	})
}

// TestNodePodsAllowance: a node whose allocatable allows 3 pods takes 3
// pods of gpuplane-scheduler; the others wait saying too many pods.
func TestNodePodsAllowance(t *testing.T) {
	node := gpuNodes(1, "pods")[0].Pods(3)
	name := node.Obj().Name
	c := newCluster(t, node)
	c.run(adapter.Config{})
	c.alwaysPods("at most 3 pods bound", "app=small", atMostBound(3))
	for i := range 5 {
		c.create(c.pod(fmt.Sprintf("small-%d", i)).Label("app", "small").NodeSelector("kubernetes.io/hostname", name))
	}
	c.waitBound("app=small", 3, 30*time.Second)
	ps, err := c.pods(t.Context(), "app=small")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Spec.NodeName == "" {
			c.waitCondition(p.Name, corev1.PodReasonUnschedulable, "1 too many pods", 30*time.Second)
		}
	}
}

// TestTimeSlicedDGXTakesReplicas: a DGX H100 whose GPUs are time-sliced 4
// ways under nvidia.com/gpu (allocatable nvidia.com/gpu: 32) takes twelve
// pods of nvidia.com/gpu: 1, and up to 32, one replica each, four to a
// GPU as the scheduler's choice records; the 33rd waits for a replica.
func TestTimeSlicedDGXTakesReplicas(t *testing.T) {
	node := gpuNodes(1, "sliced")[0].GPUs(32).Label(gpunode.LabelGPUReplicas, "4").Label(build.LabelGPUCount, "8")
	c := newCluster(t, node)
	c.run(adapter.Config{})
	c.alwaysPods("at most 32 pods bound", "app=sliced", atMostBound(32))
	create := func(from, to int) {
		for i := from; i < to; i++ {
			c.create(c.pod(fmt.Sprintf("sliced-%02d", i)).Label("app", "sliced").GPUs(1))
		}
	}
	create(0, 12)
	c.waitBound("app=sliced", 12, 60*time.Second)
	create(12, 33)
	c.waitBound("app=sliced", 32, 60*time.Second)
	ps, err := c.pods(t.Context(), "app=sliced")
	if err != nil {
		t.Fatal(err)
	}
	perGPU := map[int]int{}
	for _, p := range ps {
		if p.Spec.NodeName == "" {
			c.waitCondition(p.Name, corev1.PodReasonUnschedulable, "insufficient nvidia.com/gpu", 30*time.Second)
			continue
		}
		choice, err := gpupod.ParseGPUs(p.Annotations[gpupod.GPUsAnnotation], 8)
		if err != nil || len(choice) != 1 || choice[0].Milli != 250 {
			t.Fatalf("pod %s: choice %q (%v), want one replica (a quarter) of one GPU", p.Name, p.Annotations[gpupod.GPUsAnnotation], err)
		}
		perGPU[choice[0].Index]++
	}
	counts := make([]int, 0, len(perGPU))
	for _, n := range perGPU {
		counts = append(counts, n)
	}
	if len(perGPU) != 8 || slices.Max(counts) != 4 {
		t.Errorf("replicas per GPU %v, want 4 on each of the 8 GPUs", perGPU)
	}
}
