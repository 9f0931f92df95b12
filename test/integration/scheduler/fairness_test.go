package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// getQueue reads queue name from the API server.
func (c *cluster) getQueue(ctx context.Context, name string) (*v1alpha1.Queue, error) {
	u, err := c.dyn.Resource(v1alpha1.QueuesResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var q v1alpha1.Queue
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err != nil {
		return nil, fmt.Errorf("decoding queue %s: %w", name, err)
	}
	return &q, nil
}

// A queue's usage over time lives in its status on the API server, so a
// scheduler that starts again goes on from it: the queue that ran the
// node before the restart comes second after it, though both queues run
// nothing then. The status must survive the CRD's schema (a field the
// schema lacks is pruned by the API server without an error).
func TestQueueUsageOverTimeOutlivesTheScheduler(t *testing.T) {
	nodes := gpuNodes(1, "history")
	node := nodes[0].Obj().Name
	c := newCluster(t, nodes...)
	// a sorts before b and its pod is created first: with the history
	// forgotten, a would be served first.
	a, b := "hist-a-"+c.ns, "hist-b-"+c.ns
	for _, q := range []string{a, b} {
		c.policyQueue(build.Queue(q).GPUs("", "").UsageHalfLife(time.Hour).Obj())
	}
	c.create(c.pod("ran").GPUs(8).Label(v1alpha1.QueueLabel, a).
		NodeName(node).Annotation(adapter.GPUsAnnotation, "0,1,2,3,4,5,6,7"))

	stop := c.run(adapter.Config{})
	var kept *v1alpha1.QueueUsageOverTime
	framework.Eventually(t, 30*time.Second, "queue a's status.usageOverTime of 8 GPUs", func(ctx context.Context) (bool, error) {
		q, err := c.getQueue(ctx, a)
		if err != nil || q.Status.UsageOverTime == nil {
			return false, err
		}
		kept = q.Status.UsageOverTime
		gpus := kept.Usage[framework.ResourceGPU]
		return gpus.MilliValue() == 8000, nil
	})
	stop()

	if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), "ran", deleteNow()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "pod ran gone", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "")
		return err == nil && len(ps) == 0, err
	})
	c.create(c.pod("wants-a").GPUs(8).Label(v1alpha1.QueueLabel, a).Label("wants", "node"))
	c.create(c.pod("wants-b").GPUs(8).Label(v1alpha1.QueueLabel, b).Label("wants", "node"))

	c.run(adapter.Config{})
	c.waitBound("wants=node", 1, 30*time.Second)
	ps, err := c.pods(t.Context(), "wants=node")
	if err != nil {
		t.Fatal(err)
	}
	if ps["wants-b"].Spec.NodeName == "" {
		t.Errorf("after the restart wants-a got the node (status.usageOverTime %+v read back?), want wants-b: queue %s used less lately", kept, b)
	}
	q, err := c.getQueue(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status.UsageOverTime == nil || q.Status.UsageOverTime.At.Before(&kept.At) {
		t.Errorf("queue a's status.usageOverTime after the restart %+v, want it kept from %+v on", q.Status.UsageOverTime, kept)
	}
}
