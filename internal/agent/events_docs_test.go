package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/gpuplane/gpuplane/api/reasons"
)

// TestQuarantineEventsLinkTheirEntry checks that the quarantine's Node
// events end with their step's troubleshooting entry.
func TestQuarantineEventsLinkTheirEntry(t *testing.T) {
	rec := record.NewFakeRecorder(1)
	nodeEvents{rec: rec, ref: &corev1.ObjectReference{Kind: "Node", Name: "n"}}.Eventf(corev1.EventTypeWarning, "GPUHeld", "GPU %d (%s): stays quarantined", 3, "GPU-x")
	want := "Warning GPUHeld GPU 3 (GPU-x): stays quarantined (see " + reasons.DocsURL + "#gpuheld)"
	if got := <-rec.Events; !strings.HasPrefix(got, want) {
		t.Errorf("event %q, want %q", got, want)
	}
}
