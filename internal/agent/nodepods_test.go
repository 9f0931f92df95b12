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
