package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// restrictQueue sets a Queue's spec.namespaceSelector to admit only the
// namespace named ns.
func (c *cluster) restrictQueue(q, ns string) {
	c.t.Helper()
	// A merge patch: the scheduler writes the Queue's status meanwhile, so
	// an update of what was read would conflict.
	patch := fmt.Sprintf(`{"spec":{"namespaceSelector":{"matchLabels":{%q:%q}}}}`, corev1.LabelMetadataName, ns)
	if _, err := c.dyn.Resource(v1alpha1.QueuesResource).Patch(context.Background(), q, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Error(err)
	}
}

// Pods written for Kueue, KAI and Volcano join the queue and group they
// name; a queue admits only the namespaces it says; what is ambiguous or
// not allowed waits with the reason on the pod.
func TestDialectsAndQueueNamespaces(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "dialect")...)
	mine, closed := c.ns+"-mine", c.ns+"-closed"
	c.queue(mine, "", 0, 0)
	c.queue(closed, "", 0, 0)
	c.restrictQueue(mine, c.ns)
	c.restrictQueue(closed, "some-other-team")
	c.podGroup("volcano", 2, "")
	c.create(
		c.pod("kai").GPUs(1).Label(v1alpha1.KAIQueueLabel, mine),
		c.pod("kueue").GPUs(1).Label(v1alpha1.KueueQueueLabel, mine),
		c.pod("vc-0").GPUs(2).Annotation(v1alpha1.VolcanoGroupAnnotation, "volcano").Annotation(v1alpha1.VolcanoQueueAnnotation, mine),
		c.pod("vc-1").GPUs(2).Annotation(v1alpha1.VolcanoGroupAnnotation, "volcano"),
		c.pod("not-allowed").GPUs(1).Label(v1alpha1.QueueLabel, closed),
		c.pod("conflict").GPUs(1).Label(v1alpha1.QueueLabel, mine).Label(v1alpha1.KAIQueueLabel, closed),
	)
	c.run(adapter.Config{})
	for _, p := range []string{"kai", "kueue", "vc-0", "vc-1"} {
		env.WaitPodPhase(t, c.ns, p, corev1.PodRunning, 30*time.Second)
	}
	t.Run("the queue records the dialects' pods", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "queue usage", func(ctx context.Context) (bool, error) {
			u, err := c.dyn.Resource(v1alpha1.QueuesResource).Get(ctx, mine, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got, _, _ := unstructured.NestedString(u.Object, "status", "usage", string(framework.ResourceGPU))
			return got == "6", fmt.Errorf("usage %q", got)
		})
	})
	t.Run("a namespace the queue does not admit waits with the reason", func(t *testing.T) {
		c.waitCondition("not-allowed", "QueueNotAllowed", "may not submit to queue "+`"`+closed+`"`, 30*time.Second)
	})
	t.Run("two dialects naming different queues wait with both named", func(t *testing.T) {
		c.waitCondition("conflict", "ConflictingQueues", v1alpha1.KAIQueueLabel, 30*time.Second)
	})
	t.Run("admitting the namespace lets the pod run", func(t *testing.T) {
		c.restrictQueue(closed, c.ns)
		env.WaitPodPhase(t, c.ns, "not-allowed", corev1.PodRunning, 30*time.Second)
	})
}
