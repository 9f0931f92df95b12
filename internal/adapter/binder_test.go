package adapter

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRefusals checks that a refused eviction protects the very pod it was
// refused for, until its time, and not a pod recreated under its name.
func TestRefusals(t *testing.T) {
	r := newRefusals()
	now := time.Unix(1000, 0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}}
	again := pod.DeepCopy()
	again.UID = "uid-2"
	r.add("ns/p", pod.UID, now.Add(10*time.Second))
	if !r.active("ns/p", pod, now) {
		t.Error("a refused pod is not protected before its time")
	}
	if r.active("ns/p", again, now) {
		t.Error("a pod recreated under the refused one's name is protected")
	}
	if got := r.expire(now.Add(5 * time.Second)); len(got) != 0 {
		t.Errorf("expired %v before the time", got)
	}
	if got := r.expire(now.Add(10 * time.Second)); !slices.Equal(got, []string{"ns/p"}) {
		t.Errorf("expired %v at the time, want [ns/p]", got)
	}
	if r.active("ns/p", pod, now) {
		t.Error("an expired refusal still protects its pod")
	}
}
