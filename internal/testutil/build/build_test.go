package build_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func TestPod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     *build.PodBuilder
		check func(p *corev1.Pod) bool
	}{
		{"a limit is also the request", build.Pod("ns", "p").GPUs(2), func(p *corev1.Pod) bool {
			r := p.Spec.Containers[0].Resources
			return r.Limits.Name(build.ResourceGPU, "").Value() == 2 && r.Requests.Name(build.ResourceGPU, "").Value() == 2
		}},
		{"no counts, no containers", build.Pod("ns", "p").Containers(""), func(p *corev1.Pod) bool { return len(p.Spec.Containers) == 0 }},
		{"one container per count", build.Pod("ns", "p").Containers(build.ResourceGPU, 1, 2), func(p *corev1.Pod) bool {
			return len(p.Spec.Containers) == 2 && p.Spec.Containers[1].Name == "c1" && p.Spec.Containers[1].Resources.Limits.Name(build.ResourceGPU, "").Value() == 2
		}},
		{"a claim is the pod's and its first container's", build.Pod("ns", "p").Claim("gpu", "c"), func(p *corev1.Pod) bool {
			return len(p.Spec.ResourceClaims) == 1 && *p.Spec.ResourceClaims[0].ResourceClaimName == "c" && p.Spec.Containers[0].Resources.Claims[0].Name == "gpu"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := tc.b.Obj(); !tc.check(p) {
				t.Fatalf("built %+v", p.Spec)
			}
		})
	}
}

// TestObjIsACopy: changing what Obj returned changes neither the builder
// nor what it builds next.
func TestObjIsACopy(t *testing.T) {
	pb := build.Pod("ns", "p").Label("a", "1").GPUs(1)
	p := pb.Obj()
	p.Labels["a"] = "2"
	p.Spec.Containers[0].Resources.Limits[build.ResourceGPU] = p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]
	if q := pb.Obj(); q.Labels["a"] != "1" || q.Spec.Containers[0].Resources.Limits.Name(build.ResourceGPU, "").Value() != 1 {
		t.Fatalf("the builder changed: %+v", q)
	}
	nb := build.Node("n").GPUs(8)
	n := nb.Obj()
	n.Labels[build.LabelGPUCount] = "0"
	if nb.Obj().Labels[build.LabelGPUCount] != "8" {
		t.Fatal("the node builder changed")
	}
}
