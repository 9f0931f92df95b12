package adapter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/deploy/crds"
)

// crdResource is the API of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdFieldManager owns the fields of the CRDs the scheduler applies.
const crdFieldManager = "gpuplane-scheduler"

// crdEstablishTimeout bounds the wait for an applied CRD to be served.
const crdEstablishTimeout = time.Minute

// ownCRDs returns the Queue, PodGroup, GroupingRule and Topology CRDs the
// scheduler was built with.
func ownCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(crds.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := fs.ReadFile(crds.Files, p)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("the built-in CRD %s: %w", p, err)
		}
		out = append(out, crd)
		return nil
	})
	return out, err
}

// missingFields lists what the installed CRD lacks of want: a version that
// is not served, or a schema field (by path) that is absent or of another
// type. Nothing missing means the cluster serves at least what the
// scheduler reads and writes; it may serve more (a newer gpuplane's), which
// is left alone so that replicas of two versions do not undo each other.
func missingFields(installed, want *apiextensionsv1.CustomResourceDefinition) []string {
	var missing []string
	for _, wv := range want.Spec.Versions {
		i := slices.IndexFunc(installed.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == wv.Name })
		if i < 0 || !installed.Spec.Versions[i].Served {
			missing = append(missing, "version "+wv.Name)
			continue
		}
		iv := installed.Spec.Versions[i]
		if wv.Subresources != nil && wv.Subresources.Status != nil && (iv.Subresources == nil || iv.Subresources.Status == nil) {
			missing = append(missing, wv.Name+" status subresource")
		}
		if wv.Schema == nil || wv.Schema.OpenAPIV3Schema == nil {
			continue
		}
		var have *apiextensionsv1.JSONSchemaProps
		if iv.Schema != nil {
			have = iv.Schema.OpenAPIV3Schema
		}
		missing = append(missing, schemaMissing(wv.Name, have, wv.Schema.OpenAPIV3Schema)...)
	}
	return missing
}

// schemaMissing walks want's properties and items, naming each path that
// have lacks.
func schemaMissing(path string, have, want *apiextensionsv1.JSONSchemaProps) []string {
	if have == nil {
		return []string{path}
	}
	if want.Type != "" && have.Type != want.Type {
		return []string{fmt.Sprintf("%s (type %s, installed %s)", path, want.Type, have.Type)}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want.Properties)) {
		w := want.Properties[name]
		var h *apiextensionsv1.JSONSchemaProps
		if p, ok := have.Properties[name]; ok {
			h = &p
		}
		out = append(out, schemaMissing(path+"."+name, h, &w)...)
	}
	if want.Items != nil && want.Items.Schema != nil {
		var h *apiextensionsv1.JSONSchemaProps
		if have.Items != nil {
			h = have.Items.Schema
		}
		out = append(out, schemaMissing(path+"[]", h, want.Items.Schema)...)
	}
	if want.AdditionalProperties != nil && want.AdditionalProperties.Schema != nil {
		var h *apiextensionsv1.JSONSchemaProps
		if have.AdditionalProperties != nil {
			h = have.AdditionalProperties.Schema
		}
		out = append(out, schemaMissing(path+"{}", h, want.AdditionalProperties.Schema)...)
	}
	return out
}

// ensureCRDs makes the cluster serve at least the CRDs the scheduler was
// built with. A CRD that is absent or lacks a field is applied (server-side
// apply, field manager gpuplane-scheduler) when manage is true, and the
// scheduler waits until it is established; otherwise, or when the apply is
// refused, it is an error naming what is missing and the fix, so the
// scheduler never runs against a schema older than itself (which would
// prune the fields it writes).
func ensureCRDs(ctx context.Context, dyn dynamic.Interface, manage bool, log logr.Logger) error {
	want, err := ownCRDs()
	if err != nil {
		return err
	}
	client := dyn.Resource(crdResource)
	// The CRDs are read all at once: one round trip at start, not one per
	// CRD, before anything else is listed.
	missings := make([][]string, len(want))
	errs := make([]error, len(want))
	var wg sync.WaitGroup
	for i, crd := range want {
		wg.Go(func() { missings[i], errs[i] = crdMissing(ctx, client, crd) })
	}
	wg.Wait()
	for i, crd := range want {
		missing, err := missings[i], errs[i]
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			continue
		}
		fix := "apply deploy/crds/" + crd.Spec.Group + "_" + crd.Spec.Names.Plural + ".yaml (kubectl apply --server-side -f), or let the scheduler do it (--manage-crds, RBAC: get and patch customresourcedefinitions " + crd.Name + ")"
		if !manage {
			return fmt.Errorf("%w: the cluster's CRD %s is older than this scheduler (missing: %s); %s", errCRDOlder, crd.Name, strings.Join(missing, ", "), fix)
		}
		log.Info("applying the CRD the scheduler was built with", "crd", crd.Name, "missing", missing)
		if err := applyCRD(ctx, client, crd); err != nil {
			return fmt.Errorf("%w: the cluster's CRD %s is older than this scheduler (missing: %s) and applying it failed: %w; %s", errCRDOlder, crd.Name, strings.Join(missing, ", "), err, fix)
		}
		if err := waitEstablished(ctx, client, crd); err != nil {
			return err
		}
	}
	return nil
}

// crdMissing reads the installed CRD and returns what it lacks of want
// (the whole CRD when it is absent).
func crdMissing(ctx context.Context, client dynamic.NamespaceableResourceInterface, want *apiextensionsv1.CustomResourceDefinition) ([]string, error) {
	u, err := client.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []string{"the whole CRD"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CRD %s (RBAC: get customresourcedefinitions): %w", want.Name, err)
	}
	installed := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, installed); err != nil {
		return nil, fmt.Errorf("decoding the CRD %s: %w", want.Name, err)
	}
	return missingFields(installed, want), nil
}

func applyCRD(ctx context.Context, client dynamic.NamespaceableResourceInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	c := crd.DeepCopy()
	c.APIVersion, c.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	c.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	_, err = client.Apply(ctx, c.Name, u, metav1.ApplyOptions{FieldManager: crdFieldManager, Force: true})
	return err
}

// waitEstablished waits until the CRD is established and serves what the
// scheduler needs.
func waitEstablished(ctx context.Context, client dynamic.NamespaceableResourceInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	ctx, cancel := context.WithTimeout(ctx, crdEstablishTimeout)
	defer cancel()
	for {
		u, err := client.Get(ctx, crd.Name, metav1.GetOptions{})
		if err == nil {
			installed := &apiextensionsv1.CustomResourceDefinition{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, installed); err == nil &&
				established(installed) && len(missingFields(installed, crd)) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the CRD %s was applied but is not established within %v: %w", crd.Name, crdEstablishTimeout, errors.Join(context.Cause(ctx), err))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// ensureCRDsRetrying runs ensureCRDs until it succeeds, the API server
// refuses (an answer, such as Forbidden, or a CRD older than the
// scheduler: returned) or ctx ends; an unreachable API server is retried
// every apiRetryLog.
func ensureCRDsRetrying(ctx context.Context, dyn dynamic.Interface, host string, manage bool, log logr.Logger) error {
	for {
		err := ensureCRDs(ctx, dyn, manage, log)
		var status apierrors.APIStatus
		if err == nil || errors.As(err, &status) || errors.Is(err, errCRDOlder) || ctx.Err() != nil {
			return err
		}
		log.Error(err, "cannot reach the API server; retrying", "host", host, "checking", "the Queue and PodGroup CRDs", "every", apiRetryLog)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(apiRetryLog):
		}
	}
}

// errCRDOlder marks a cluster whose CRDs lack what the scheduler needs.
var errCRDOlder = errors.New("refusing to run")
