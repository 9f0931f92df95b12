package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates every CustomResourceDefinition in the YAML files of
// dir (those that exist already are kept) and waits until the API server
// serves them. It returns a dynamic client for their objects.
func (e *Env) InstallCRDs(t TB, dir string) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("creating a dynamic client: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD files in %s (%v)", dir, err)
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("reading CRDs: %v", err)
		}
		dec := yamlutil.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("decoding %s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if _, err := d.Resource(crdResource).Create(t.Context(), &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("installing %s from %s: %v", u.GetName(), f, err)
			}
			names = append(names, u.GetName())
		}
	}
	for _, n := range names {
		Eventually(t, 30*time.Second, "CRD "+n+" established", func(ctx context.Context) (bool, error) {
			u, err := d.Resource(crdResource).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %v", conds)
		})
	}
	return d
}
