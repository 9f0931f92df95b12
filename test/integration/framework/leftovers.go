package framework

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// ReleaseLeftovers lists what an uninstalled gpuplane release left behind:
// the objects of kinds labelled app.kubernetes.io/part-of=gpuplane (a kind
// the server does not serve is skipped), and Helm's release records in
// namespace. Empty after a clean uninstall.
func ReleaseLeftovers(t *testing.T, d dynamic.Interface, namespace string, kinds []schema.GroupVersionResource) []string {
	t.Helper()
	var left []string
	for _, k := range kinds {
		list, err := d.Resource(k).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=gpuplane"})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatalf("listing %s: %v", k.Resource, err)
		}
		for _, o := range list.Items {
			left = append(left, fmt.Sprintf("%s %s/%s", k.Resource, o.GetNamespace(), o.GetName()))
		}
	}
	rel, err := d.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rel.Items {
		left = append(left, "helm release record "+o.GetName())
	}
	return left
}
