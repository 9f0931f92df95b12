package doctor

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// TestHelpListsEveryCheck runs doctor over pods and nodes that make every
// check print, and fails when a check it prints is not in podChecks or
// nodeChecks (and so not in --help), or a listed check never prints.
func TestHelpListsEveryCheck(t *testing.T) {
	failedPod := build.Pod("ml", "refused").GPUs(1).SchedulerName(v1alpha1.SchedulerName).NodeName("gpu-1").Phase(corev1.PodFailed).Obj()
	failedPod.Status.Reason, failedPod.Status.Message = "UnexpectedAdmissionError", "no GPU left"
	waiting := build.Pod("ml", "waiting").GPUs(8).SchedulerName(v1alpha1.SchedulerName).
		Label(v1alpha1.PodGroupLabel, "gang").Label(v1alpha1.QueueLabel, "team-a").Obj()
	waiting.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "DoesNotFit", Message: "0/4 nodes"}}
	holder := build.Pod("ml", "holder").GPUs(1).NodeName("gpu-1").Phase(corev1.PodRunning).Annotation("gpuplane.io/gpus-held", "0").Obj()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{gpunode.LabelGPUProduct: "NVIDIA-H100", gpunode.LabelGPUCount: "8"}}}
	node.Spec.Unschedulable = true
	node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
	node.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletDown"},
		{Type: gpunode.ConditionGPUReady, Status: corev1.ConditionTrue, Message: "8 GPUs"},
		{Type: gpunode.ConditionGPUQuarantine, Status: corev1.ConditionTrue, Reason: gpunode.ReasonGPUQuarantined, Message: "GPU 3"},
	}
	node.Status.Capacity = corev1.ResourceList{gpunode.ResourceGPU: resource.MustParse("8")}
	node.Status.Allocatable = corev1.ResourceList{gpunode.ResourceGPU: resource.MustParse("7")}
	warn := func(ns, kind, name string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-warn"}, Type: corev1.EventTypeWarning, Reason: "Something",
			InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name}}
	}
	client := fake.NewClientset(failedPod, waiting, holder, node, warn("ml", "Pod", "waiting"), warn(metav1.NamespaceDefault, "Node", "gpu-1"))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PodGroupsResource: "PodGroupList", v1alpha1.QueuesResource: "QueueList",
	})
	d := &doctor{client: client, dyn: dyn}
	ctx := context.Background()
	printed := map[string]bool{}
	check := func(docs []checkDoc, r *Report) {
		for _, c := range r.Checks {
			if !documented(docs, c.Name) {
				t.Errorf("%s %s: check %q is not listed in doctor's help; add it to %sChecks", r.Kind, r.Name, c.Name, strings.ToLower(r.Kind))
			}
			name := c.Name
			if strings.HasPrefix(name, "event ") {
				name = "event REASON"
			}
			printed[r.Kind+"/"+name] = true
		}
	}
	for _, p := range []*corev1.Pod{failedPod, waiting} {
		check(podChecks, d.pod(ctx, p))
	}
	check(nodeChecks, d.node(ctx, node))

	long := NewCommand().Long
	for kind, docs := range map[string][]checkDoc{"Pod": podChecks, "Node": nodeChecks} {
		for _, doc := range docs {
			if !printed[kind+"/"+doc.name] {
				t.Errorf("%s check %q is listed but none of the test's objects printed it", kind, doc.name)
			}
			if !strings.Contains(long, "  "+doc.name+" ") {
				t.Errorf("doctor --help lacks the %s check %q", kind, doc.name)
			}
		}
	}
}
