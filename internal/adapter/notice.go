package adapter

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// A notice tells a running pod that gpuplane is about to stop it, before
// anything stops it: a condition on the pod's status (Type True, with
// Reason and Message) that the workload can watch through the downward
// API or the API server, and an event of the same type. The eviction that
// follows (noticeEviction) gives the pod's containers Grace between
// SIGTERM and SIGKILL, so that a job that saw the notice, or handles
// SIGTERM, can checkpoint.
//
// Preemption and reclaim give notice with Type PreemptionNotice
// (preemptionNotice); anything else that stops pods with warning (a node
// about to go away) builds a notice of its own type and uses the same
// two steps.
type notice struct {
	// Type is the pod condition type set True, and the event's reason.
	Type string
	// Reason and Message are the condition's; the event carries Message.
	Reason  string
	Message string
	// Grace is the eviction's grace period in seconds; nil keeps the
	// pod's own terminationGracePeriodSeconds.
	Grace *int64
}

// noticeCondition is n as the pod condition it sets, stamped at now.
func (n notice) condition(now metav1.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodConditionType(n.Type), Status: corev1.ConditionTrue,
		Reason: n.Reason, Message: n.Message, LastTransitionTime: now}
}

// hasNotice reports whether pod already carries a notice of n's type,
// reason and message: giving it again changes nothing.
func hasNotice(pod *corev1.Pod, n notice) bool {
	for _, c := range pod.Status.Conditions {
		if string(c.Type) == n.Type && c.Status == corev1.ConditionTrue && c.Reason == n.Reason && c.Message == n.Message {
			return true
		}
	}
	return false
}

// noticePatch is the strategic merge patch of pod's status that sets n's
// condition: conditions merge by type, so the pod's others stay. The UID
// makes the patch fail for a pod recreated under the same name.
func noticePatch(pod *corev1.Pod, n notice, now metav1.Time) ([]byte, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"conditions": []corev1.PodCondition{n.condition(now)}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the %s condition of pod %s/%s: %w", n.Type, pod.Namespace, pod.Name, err)
	}
	return patch, nil
}

// giveNotice writes n's condition on pod, then records its event through
// events. It returns the API server's error (not found for a pod already
// gone), and records no event then.
func giveNotice(ctx context.Context, client kubernetes.Interface, events statusSink, pod *corev1.Pod, n notice) error {
	if !hasNotice(pod, n) {
		patch, err := noticePatch(pod, n, metav1.Now())
		if err != nil {
			return err
		}
		if _, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("writing the %s condition of pod %s/%s: %w", n.Type, pod.Namespace, pod.Name, err)
		}
	}
	events.event(pod, corev1.EventTypeWarning, n.Type, n.Message)
	return nil
}

// noticeEviction is the Eviction of pod after notice n: n's grace period,
// and the pod's UID as a precondition so that a pod recreated under the
// same name is left alone.
func noticeEviction(pod *corev1.Pod, n notice) *policyv1.Eviction {
	return &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: n.Grace, Preconditions: &metav1.Preconditions{UID: &pod.UID}}}
}

// preemptionNotice is the notice a victim of preemption or reclaim gets:
// reason Preempt or Reclaim (the core's Eviction.Reason), the group it
// makes room for, and grace, the victim's Queue's
// spec.preemptionGracePeriodSeconds (nil: the pod's own).
func preemptionNotice(reason, forGroup string, grace *int64) notice {
	r := "Preempt"
	if reason == "reclaim" {
		r = "Reclaim"
	}
	msg := fmt.Sprintf("gpuplane-scheduler evicts this pod (%s) to make room for %s", reason, forGroup)
	if grace != nil {
		msg += fmt.Sprintf("; it has %ds after SIGTERM to checkpoint", *grace)
	}
	return notice{Type: v1alpha1.ConditionPreemptionNotice, Reason: r, Message: msg, Grace: grace}
}
