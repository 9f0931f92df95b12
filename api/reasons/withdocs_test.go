package reasons

import (
	"strings"
	"testing"
)

// TestWithDocs checks that events end with their reason's troubleshooting
// entry, within the length an event keeps.
func TestWithDocs(t *testing.T) {
	tests := []struct {
		name, reason, msg, want string
	}{
		{"a wait reason", "QueueNotAllowed", "namespace ml may not submit to queue a",
			"namespace ml may not submit to queue a (see " + DocsURL + "#queuenotallowed)"},
		{"FailedScheduling links Unschedulable", "FailedScheduling", "0/2 nodes available",
			"0/2 nodes available (see " + DocsURL + "#unschedulable)"},
		{"another component's reason is left alone", "BackOff", "restarting", "restarting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := WithDocs(tc.reason, tc.msg); got != tc.want {
				t.Errorf("WithDocs(%q, %q) = %q, want %q", tc.reason, tc.msg, got, tc.want)
			}
		})
	}
	t.Run("a long message is shortened, not the address", func(t *testing.T) {
		got := WithDocs("DoesNotFit", strings.Repeat("é", 700))
		if len(got) > MaxEventMessage {
			t.Errorf("%d bytes, more than %d", len(got), MaxEventMessage)
		}
		if !strings.HasSuffix(got, "... (see "+DocsURL+"#doesnotfit)") {
			t.Errorf("the address is not whole at the end: %q", got[len(got)-120:])
		}
		if !strings.HasPrefix(got, "éé") || strings.Contains(got, "\ufffd") {
			t.Errorf("the message was cut inside a character")
		}
	})
}
