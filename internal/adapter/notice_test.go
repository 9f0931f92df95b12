package adapter

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func TestGiveNoticeSetsTheConditionThenTheEvent(t *testing.T) {
	pod := newPod("ns", "victim").GPUs(2).Obj()
	pod.UID = "uid-1"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	client := fake.NewClientset(pod)
	status := &fakeStatus{}
	grace := int64(45)
	n := preemptionNotice("reclaim", "team-a/train", &grace)
	if err := giveNotice(context.Background(), client, status, pod, n); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods("ns").Get(context.Background(), "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var notice *corev1.PodCondition
	for i, c := range got.Status.Conditions {
		if c.Type == v1alpha1.ConditionPreemptionNotice {
			notice = &got.Status.Conditions[i]
		}
	}
	if notice == nil || notice.Status != corev1.ConditionTrue || notice.Reason != "Reclaim" || !strings.Contains(notice.Message, "team-a/train") || !strings.Contains(notice.Message, "45s") {
		t.Fatalf("conditions %+v, want PreemptionNotice True, reason Reclaim, naming the group and the grace", got.Status.Conditions)
	}
	if len(got.Status.Conditions) != 2 {
		t.Errorf("conditions %+v, want the pod's Ready kept beside the notice", got.Status.Conditions)
	}
	if len(status.events) != 1 || !strings.HasPrefix(status.events[0], "PreemptionNotice victim:") {
		t.Errorf("events %v, want one PreemptionNotice on the victim", status.events)
	}

	// A pod that already carries the notice is not written again.
	patches := len(client.Actions())
	if err := giveNotice(context.Background(), client, status, got, n); err != nil {
		t.Fatal(err)
	}
	if len(client.Actions()) != patches {
		t.Errorf("the notice was written again: actions %v", client.Actions()[patches:])
	}

	// A pod that is gone gets no event.
	gone := newPod("ns", "gone").Obj()
	if err := giveNotice(context.Background(), client, status, gone, n); err == nil {
		t.Error("a notice to a pod that does not exist succeeded")
	}
	if len(status.events) != 2 {
		t.Errorf("events %v, want none for the pod that is gone", status.events)
	}
}

func TestNoticeEvictionCarriesTheGraceAndTheUID(t *testing.T) {
	pod := newPod("ns", "victim").Obj()
	pod.UID = "uid-1"
	for _, grace := range []*int64{nil, ptrTo(int64(0)), ptrTo(int64(600))} {
		t.Run(fmt.Sprint(grace != nil), func(t *testing.T) {
			ev := noticeEviction(pod, preemptionNotice("preempt", "g", grace))
			if ev.Name != "victim" || ev.Namespace != "ns" || *ev.DeleteOptions.Preconditions.UID != "uid-1" {
				t.Fatalf("eviction %+v, want the pod by name with its UID as precondition", ev)
			}
			if got := ev.DeleteOptions.GracePeriodSeconds; (got == nil) != (grace == nil) || got != nil && *got != *grace {
				t.Errorf("grace %v, want %v", got, grace)
			}
		})
	}
	if n := preemptionNotice("preempt", "g", nil); n.Reason != "Preempt" || strings.Contains(n.Message, "SIGTERM") {
		t.Errorf("notice %+v, want reason Preempt and no grace promised", n)
	}
}

func ptrTo[T any](v T) *T { return &v }

// The loop gives each victim the grace period of its own Queue.
func TestLoopGivesVictimsTheirQueuesGrace(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	grace := int64(120)
	q := build.Queue("research").Obj()
	q.Spec.PreemptionGracePeriodSeconds = &grace
	f.cache.upsertQueue(q)
	low := int32(1)
	p := newPod("ns", "low").GPUs(8).Label(v1alpha1.QueueLabel, "research").Obj()
	p.Spec.NodeName, p.Spec.Priority = "a", &low
	p.Annotations = map[string]string{GPUsAnnotation: "0,1,2,3,4,5,6,7"}
	f.cache.upsertPod(p)
	high := int32(100)
	urgent := newPod("ns", "urgent").GPUs(8).Label(v1alpha1.QueueLabel, "research").Obj()
	urgent.Spec.Priority = &high
	f.cache.upsertPod(urgent)
	f.cycle()
	if len(f.api.evicted) != 1 || f.api.evicted[0] != "ns/low" {
		t.Fatalf("evicted %v, want ns/low", f.api.evicted)
	}
	n := f.api.notices[0]
	if n.Type != v1alpha1.ConditionPreemptionNotice || n.Reason != "Preempt" || n.Grace == nil || *n.Grace != grace || !strings.Contains(n.Message, "urgent") {
		t.Errorf("notice %+v, want PreemptionNotice, Preempt, the queue's 120s, naming the preemptor", n)
	}
}
