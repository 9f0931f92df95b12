package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// A Job whose derived minMember can never fit its queue's limit does not
// wait as if room could come: its PodGroup says ExceedsQueueLimit, and its
// pods carry the condition and a Warning event naming spec.minMember,
// where it came from, and the limit. Raising the limit lets it run whole.
func TestDerivedMinMemberAboveQueueLimit(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "never")...)
	q := c.ns + "-small"
	c.queue(q, "", 0, 3)
	c.run(adapter.Config{})
	job := c.job("wide", 4, 1, true, map[string]string{v1alpha1.QueueLabel: q})
	pg := c.derivedGroup("Job", "wide", string(job.UID))

	want := []string{"spec.minMember 4", "from builtin/batch-job spec.minMember", fmt.Sprintf("above queue %q's limit {nvidia.com/gpu=3}", q)}
	framework.Eventually(t, 30*time.Second, "the PodGroup says ExceedsQueueLimit", func(ctx context.Context) (bool, error) {
		g, err := c.getPodGroup(ctx, pg.Name)
		if err != nil {
			return false, err
		}
		cd := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionSchedulable)
		if cd == nil || cd.Status != metav1.ConditionFalse || cd.Reason != "ExceedsQueueLimit" {
			return false, fmt.Errorf("conditions %v", g.Status.Conditions)
		}
		for _, w := range want {
			if !strings.Contains(cd.Message, w) {
				t.Fatalf("condition message %q lacks %q", cd.Message, w)
			}
		}
		return true, nil
	})
	pods, err := c.pods(t.Context(), "job=wide")
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for n := range pods {
		name = n
		break
	}
	c.waitCondition(name, "ExceedsQueueLimit", want[2], 30*time.Second)
	framework.Eventually(t, 30*time.Second, "an ExceedsQueueLimit event on pod "+name, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "ExceedsQueueLimit" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "spec.minMember 4") {
				return true, nil
			}
		}
		return false, errors.New("no such event yet")
	})
	if n, _, err := c.bound(t.Context(), "job=wide"); err != nil || n != 0 {
		t.Fatalf("%d pods bound (%v), want none", n, err)
	}

	// A merge patch: the scheduler writes the Queue's status meanwhile.
	patch := `{"spec":{"resources":[{"name":"nvidia.com/gpu","limit":"4","weight":1}]}}`
	if _, err := c.dyn.Resource(v1alpha1.QueuesResource).Patch(t.Context(), q, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBound("job=wide", 4, 60*time.Second)
}
