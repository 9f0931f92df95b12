package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

// The memory a pod asked for, read from the watch's slimmed pods in each
// spelling; pods that asked for none, or are not on the node, have none.
func TestMemoryLimitOf(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	add := func(name string, annotations map[string]string, limits corev1.ResourceList) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}}}}}
		slim, err := slimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Add(slim); err != nil {
			t.Fatal(err)
		}
	}
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	add("gpuplane", map[string]string{gpupod.MemoryAnnotation: "20Gi", "unrelated": "x"}, gpu)
	add("hami", nil, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), gpupod.HAMiMemory: resource.MustParse("3000")})
	add("kai", map[string]string{gpupod.KAIMemory: "2000"}, gpu)
	add("fraction-only", map[string]string{gpupod.FractionAnnotation: "0.5"}, gpu)
	add("whole", nil, gpu)
	w := &nodePods{store: store}
	for pod, want := range map[string]int64{"gpuplane": 20480, "hami": 3000, "kai": 2000, "fraction-only": 0, "whole": 0, "absent": 0} {
		got, ok := w.memoryLimitOf("ml", pod)
		if got != want || ok != (want > 0) {
			t.Errorf("pod %s: limit %d MiB (%v), want %d", pod, got, ok, want)
		}
	}
}

// What the node's watch tells the metrics of each pod: the queue the
// scheduler recorded (only a Queue's name), and the part of a GPU a pod
// that asked for part of one was given (only on the GPU its choice names).
func TestQueueAndChargedShare(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	add := func(name string, annotations map[string]string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
		slim, err := slimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Add(slim); err != nil {
			t.Fatal(err)
		}
	}
	add("half", map[string]string{gpupod.FractionAnnotation: "0.5", gpupod.GPUsAnnotation: "3:500", gpupod.QueueAnnotation: "research"})
	add("replica", map[string]string{gpupod.GPUsAnnotation: "2:250", gpupod.QueueAnnotation: "Not A Queue!"})
	add("no-choice", map[string]string{gpupod.FractionAnnotation: "0.5"})
	add("bad-choice", map[string]string{gpupod.FractionAnnotation: "0.5", gpupod.GPUsAnnotation: "3:5000"})
	w := &nodePods{store: store}
	for _, tc := range []struct {
		pod   string
		gpu   int
		share float64
		queue string
	}{
		{"half", 3, 0.5, "research"},
		{"half", 2, 0, "research"},
		{"replica", 2, 0, ""},
		{"no-choice", 3, 0, ""},
		{"bad-choice", 3, 0, ""},
		{"absent", 3, 0, ""},
	} {
		share, ok := w.chargedShare("ml", tc.pod, tc.gpu)
		if share != tc.share || ok != (tc.share > 0) {
			t.Errorf("pod %s on GPU %d: charged %v (%v), want %v", tc.pod, tc.gpu, share, ok, tc.share)
		}
		q, ok := w.queueOf("ml", tc.pod)
		if q != tc.queue || ok != (tc.queue != "") {
			t.Errorf("pod %s: queue %q (%v), want %q", tc.pod, q, ok, tc.queue)
		}
	}
}
