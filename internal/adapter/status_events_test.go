package adapter

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/reasons"
)

// TestEventsLinkTheirTroubleshootingEntry checks that the scheduler's
// events end with the address of their reason's entry in the docs.
func TestEventsLinkTheirTroubleshootingEntry(t *testing.T) {
	rec := record.NewFakeRecorder(4)
	w := newStatusWriter(nil, nil, rec, 10, klog.Background())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	w.event(pod, corev1.EventTypeWarning, "QueueNotAllowed", "namespace ns may not submit to queue a")
	w.event(pod, corev1.EventTypeNormal, reasonOrUnschedulable(corev1.PodReasonUnschedulable), "0/2 nodes available")
	for _, want := range []string{
		"Warning QueueNotAllowed namespace ns may not submit to queue a (see " + reasons.DocsURL + "#queuenotallowed)",
		"Normal FailedScheduling 0/2 nodes available (see " + reasons.DocsURL + "#unschedulable)",
	} {
		if got := <-rec.Events; !strings.HasPrefix(got, want) {
			t.Errorf("event %q, want %q", got, want)
		}
	}
}
