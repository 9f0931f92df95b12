package helm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestGPUAccessLeavesOtherProjectsAlone applies the chart's gpu-access
// policy as the chart renders it and creates pods through the API server:
// by default only namespaces labelled gpuplane.io/gpu-access=restricted are
// checked, so another project's privileged pod (a CNI's, a CSI driver's,
// the GPU Operator's) is admitted; with gpuAccessScope all, every namespace
// but the exempt ones is.
func TestGPUAccessLeavesOtherProjectsAlone(t *testing.T) {
	ctx := t.Context()
	restricted := env.CreateNamespace(t)
	other := env.CreateNamespace(t)
	exempt := env.CreateNamespace(t)
	label := func(ns, key, value string) {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, key, value)
		if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(restricted, "gpuplane.io/gpu-access", "restricted")
	label(exempt, "gpuplane.io/unrestricted-gpu-access", "true")

	privileged := func(ns string) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cni-agent"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: "cni", SecurityContext: &corev1.SecurityContext{Privileged: new(true)},
			Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}},
		}}}}
		_, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	refused := func(ns string) framework.Condition {
		return func(context.Context) (bool, error) {
			err := privileged(ns)
			if err != nil && !strings.Contains(err.Error(), "runs privileged") && !strings.Contains(err.Error(), "sets NVIDIA_VISIBLE_DEVICES") {
				return false, err
			}
			return err != nil, nil
		}
	}

	for _, tc := range []struct {
		scope            string
		refused, allowed []string
	}{
		{"labelled", []string{restricted}, []string{other, exempt}},
		{"all", []string{restricted, other}, []string{exempt}},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			apply(t, map[string]any{"admission": map[string]any{"gpuAccessScope": tc.scope}})
			// The API server picks a policy up from a watch, a moment
			// after it is created.
			for _, ns := range tc.refused {
				framework.Eventually(t, 30*time.Second, "a privileged pod refused in "+ns, refused(ns))
			}
			for _, ns := range tc.allowed {
				if err := privileged(ns); err != nil {
					t.Errorf("a privileged pod in namespace %s: %v, want it admitted", ns, err)
				}
			}
		})
	}
}

// apply creates the chart's gpu-access policy and binding, rendered with
// values, and deletes them when the test ends.
func apply(t *testing.T, values map[string]any) {
	t.Helper()
	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	r, err := helmchart.Render(c, values, release, namespace)
	if err != nil {
		t.Fatal(err)
	}
	d := dyn(t)
	for doc := range strings.SplitSeq(r["admission/gpu-access.yaml"], "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		res := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
			res.Resource = "validatingadmissionpolicybindings"
		}
		if _, err := d.Resource(res).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() {
			if err := d.Resource(res).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		})
	}
}
