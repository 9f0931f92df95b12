package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
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
// dir (one that exists already is left as it is) and waits until each is
// Established, returning their names. It creates rather than applies: some
// operators' CRDs are larger than the annotation a client-side apply
// records.
func InstallCRDs(ctx context.Context, client dynamic.Interface, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("installing CRDs: no YAML files in %s: %w", dir, err)
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("installing CRDs: %w", err)
		}
		dec := yamlutil.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("installing CRDs: decoding %s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GetKind() != "CustomResourceDefinition" {
				return nil, fmt.Errorf("installing CRDs: %s holds a %s (%s), not a CustomResourceDefinition", f, u.GetKind(), u.GetName())
			}
			if _, err := client.Resource(crdResource).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("installing CRD %s from %s: %w", u.GetName(), f, err)
			}
			names = append(names, u.GetName())
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for _, n := range names {
		for {
			ok, err := crdEstablished(ctx, client, n)
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for CRD %s to be established: %w (last: %w)", n, ctx.Err(), err)
			case <-tick.C:
			}
		}
	}
	return names, nil
}

func crdEstablished(ctx context.Context, client dynamic.Interface, name string) (bool, error) {
	u, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
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
}
