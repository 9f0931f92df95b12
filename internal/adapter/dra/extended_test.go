package dra

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// TestExtendedRequests: the claim's requests and the pod's mappings are
// named and sized as kube-scheduler's DRAExtendedResource makes them.
func TestExtendedRequests(t *testing.T) {
	gpu := func(name, n string, sidecar bool) corev1.Container {
		c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), gpunode.ResourceGPU: resource.MustParse(n)}}}
		if sidecar {
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		return c
	}
	type req struct {
		name  string
		count int64
	}
	tests := []struct {
		name         string
		init, main   []corev1.Container
		wantReqs     []req
		wantMappings []string // container/request
	}{
		{name: "two containers", main: []corev1.Container{gpu("a", "1", false), gpu("b", "2", false)},
			wantReqs: []req{{"container-0-request-2", 1}, {"container-1-request-2", 2}}, wantMappings: []string{"a/container-0-request-2", "b/container-1-request-2"}},
		{name: "init reuses the containers' requests", init: []corev1.Container{gpu("i", "2", false)}, main: []corev1.Container{gpu("m", "2", false)},
			wantReqs: []req{{"container-1-request-2", 2}}, wantMappings: []string{"m/container-1-request-2", "i/container-1-request-2"}},
		{name: "largest init request kept", init: []corev1.Container{gpu("i0", "3", false), gpu("i1", "4", false)}, main: []corev1.Container{gpu("m", "1", false)},
			wantReqs:     []req{{"container-1-request-2", 3}, {"container-2-request-2", 1}},
			wantMappings: []string{"m/container-2-request-2", "i0/container-2-request-2", "i0/container-1-request-2", "i1/container-2-request-2", "i1/container-1-request-2"}},
		{name: "sidecar asks for its own", init: []corev1.Container{gpu("s", "1", true)}, main: []corev1.Container{gpu("m", "1", false)},
			wantReqs: []req{{"container-0-request-2", 1}, {"container-1-request-2", 1}}, wantMappings: []string{"s/container-0-request-2", "m/container-1-request-2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.main}}
			reqs, maps := extendedRequests(p, gpunode.ResourceGPU, "c")
			var got []req
			for _, r := range reqs {
				if r.Exactly.DeviceClassName != "c" {
					t.Errorf("request %s of class %s, want c", r.Name, r.Exactly.DeviceClassName)
				}
				got = append(got, req{r.Name, r.Exactly.Count})
			}
			if !slices.Equal(got, tc.wantReqs) {
				t.Errorf("requests %v, want %v", got, tc.wantReqs)
			}
			var gotMaps []string
			for _, m := range maps {
				gotMaps = append(gotMaps, m.ContainerName+"/"+m.RequestName)
			}
			if !slices.Equal(gotMaps, tc.wantMappings) {
				t.Errorf("mappings %v, want %v", gotMaps, tc.wantMappings)
			}
		})
	}
}
