package grouper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// VolcanoPodGroupKind is Volcano's own PodGroup (scheduling.volcano.sh,
// v1beta1), which pods name with the annotation scheduling.k8s.io/group-name
// (v1alpha1.VolcanoGroupAnnotation). Where the API server serves it and a
// pod's annotation names one, the Grouper mirrors it into a gpuplane PodGroup
// of the same name, owned by it, so the gang, queue and priority are the
// ones the Volcano PodGroup says.
var VolcanoPodGroupKind = schema.GroupVersionKind{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"}

// volcanoKey is what the decision for the Volcano PodGroup name in
// namespace ns is cached by.
func volcanoKey(ns, name string) ownerKey {
	return ownerKey{Namespace: ns, APIVersion: VolcanoPodGroupKind.GroupVersion().String(), Kind: VolcanoPodGroupKind.Kind, Name: name,
		UID: types.UID("volcano:" + ns + "/" + name), ByName: true, Volcano: true}
}

// decideVolcano mirrors the Volcano PodGroup k names, if there is one. A
// cluster that does not serve Volcano's PodGroup, or has none of that name,
// gets no mirror: the pod's annotation names a gpuplane PodGroup, as it
// always did. An error return is transient (the API).
func (g *Grouper) decideVolcano(ctx context.Context, k ownerKey) (*decision, error) {
	obj, err := g.get(ctx, VolcanoPodGroupKind, k.Namespace, k.Name)
	switch {
	case err == nil:
	case meta.IsNoMatchError(err), apierrors.IsNotFound(err):
		return &decision{mirror: true}, nil
	case apierrors.IsForbidden(err):
		return &decision{err: fmt.Errorf("gpuplane-scheduler may not read Volcano PodGroup %s/%s, which the pods' annotation %s names: grant it get on podgroups.scheduling.volcano.sh (the chart's scheduler.workloadKinds)",
			k.Namespace, k.Name, v1alpha1.VolcanoGroupAnnotation)}, nil
	default:
		return nil, fmt.Errorf("reading Volcano PodGroup %s/%s: %w", k.Namespace, k.Name, err)
	}
	d, err := FromVolcano(obj.Object)
	if err == nil {
		d.Topology, err = g.volcanoTopology(ctx, obj, &d)
	}
	if err != nil {
		err = fmt.Errorf("the Volcano PodGroup %s/%s: %w", k.Namespace, k.Name, err)
		g.event(obj, corev1.EventTypeWarning, "InvalidPodGroup", err.Error()+"; its pods wait until it is fixed")
		return &decision{err: err, mirror: true}, nil
	}
	if err := g.ensurePodGroup(ctx, k.Name, obj, d); err != nil {
		var perm *permanentError
		if errors.As(err, &perm) || apierrors.IsForbidden(err) {
			return &decision{err: err, mirror: true}, nil
		}
		return nil, err
	}
	return &decision{group: k.Name, mirror: true}, nil
}

// VolcanoJobKind is Volcano's Job, whose spec.networkTopology Volcano's
// job controller copies into the PodGroup it makes for it.
var VolcanoJobKind = schema.GroupVersionKind{Group: "batch.volcano.sh", Version: "v1alpha1", Kind: "Job"}

// volcanoTopology maps the Volcano PodGroup's spec.networkTopology, else
// its Volcano Job's, onto the cluster's Topology (VolcanoTopology), adding
// where it came from to d.Explain. An error is the object's to fix.
func (g *Grouper) volcanoTopology(ctx context.Context, obj *unstructured.Unstructured, d *Derived) (*v1alpha1.TopologyConstraint, error) {
	levels := g.cfg.Topologies
	if levels == nil {
		levels = func(string) (string, []string, error) {
			return "", nil, errors.New("this scheduler reads no Topology objects")
		}
	}
	tc, why, err := VolcanoTopology(obj.Object, obj.GetAnnotations(), levels)
	if err != nil || tc != nil {
		if tc != nil {
			d.Explain += "; " + why
		}
		return tc, err
	}
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != VolcanoJobKind.Kind || !strings.HasPrefix(ref.APIVersion, VolcanoJobKind.Group+"/") {
		return nil, nil
	}
	job, err := g.get(ctx, VolcanoJobKind, obj.GetNamespace(), ref.Name)
	if err != nil || job.GetUID() != ref.UID {
		// No Job to read (gone, or not readable): the PodGroup says all.
		return nil, nil //nolint:nilerr // the PodGroup's own spec stands
	}
	tc, why, err = VolcanoTopology(job.Object, job.GetAnnotations(), levels)
	if err != nil {
		return nil, fmt.Errorf("its Volcano Job %s: %w", job.GetName(), err)
	}
	if tc != nil {
		d.Explain += "; " + strings.Replace(why, "spec.networkTopology", "the Volcano Job's spec.networkTopology", 1)
	}
	return tc, nil
}

// FromVolcano reads what a gpuplane PodGroup takes from a Volcano PodGroup
// (unstructured JSON): spec.minMember, spec.queue, spec.priorityClassName
// and spec.minResources. Its errors name the field and what is wrong with
// it; nothing is defaulted to a gang of one.
func FromVolcano(obj map[string]any) (Derived, error) {
	var d Derived
	spec, _ := obj["spec"].(map[string]any)
	raw, found := spec["minMember"]
	if !found {
		return d, fmt.Errorf("spec.minMember: not set; set it to the number of pods that must start together (1 to %d)", MaxMinMember)
	}
	n, ok := integer(raw)
	switch {
	case !ok:
		return d, fmt.Errorf("spec.minMember: %v is not an integer", raw)
	case n < 1 || n > MaxMinMember:
		return d, fmt.Errorf("spec.minMember: %d, want 1 to %d (the number of pods that must start together)", n, MaxMinMember)
	}
	d.MinMember = int32(n)
	explain := []string{fmt.Sprintf("minMember %d from spec.minMember", n)}
	var err error
	if d.Queue, err = nameField(spec, "queue", "queue"); err != nil {
		return d, err
	}
	if d.Queue != "" {
		explain = append(explain, fmt.Sprintf("queue %s from spec.queue", d.Queue))
	}
	if d.PriorityClassName, err = nameField(spec, "priorityClassName", "priority class"); err != nil {
		return d, err
	}
	if d.PriorityClassName != "" {
		explain = append(explain, fmt.Sprintf("priorityClassName %s from spec.priorityClassName", d.PriorityClassName))
	}
	if raw, ok := spec["minResources"]; ok && raw != nil {
		m, ok := raw.(map[string]any)
		if !ok {
			return d, fmt.Errorf("spec.minResources: a %T, want a map of resource names to quantities", raw)
		}
		names := slices.Sorted(maps.Keys(m))
		for _, name := range names {
			q, err := quantity(m[name])
			if err != nil {
				return d, fmt.Errorf("spec.minResources.%s: %w", name, err)
			}
			if d.MinResources == nil {
				d.MinResources = corev1.ResourceList{}
			}
			d.MinResources[corev1.ResourceName(name)] = q
		}
		if len(names) > 0 {
			explain = append(explain, "minResources from spec.minResources")
		}
	}
	if sg, _ := spec["subGroupPolicy"].([]any); len(sg) > 0 {
		// Said where the user looks, rather than dropped without a word.
		explain = append(explain, "spec.subGroupPolicy not honoured (its sub-groups' networkTopology is not placed)")
	}
	if tm, _ := spec["minTaskMember"].(map[string]any); len(tm) > 0 {
		// Said where the user looks, rather than dropped without a word.
		explain = append(explain, "spec.minTaskMember not honoured (the gang is spec.minMember pods of any task)")
	}
	d.Explain = strings.Join(explain, "; ")
	return d, nil
}

// nameField reads an optional string field of spec that names an object.
func nameField(spec map[string]any, field, what string) (string, error) {
	raw, ok := spec[field]
	if !ok || raw == nil {
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("spec.%s: a %T, want a %s name", field, raw, what)
	}
	if s == "" {
		return "", nil
	}
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return "", fmt.Errorf("spec.%s: %q is not a valid %s name: %s", field, truncate(s), what, strings.Join(errs, "; "))
	}
	return s, nil
}

// integer reads a JSON number that must be a whole number.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int:
		return int64(n), true
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// quantity reads a resource quantity given as a string or a number; it
// must not be negative.
func quantity(v any) (resource.Quantity, error) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case int64, int32, int, float64, json.Number:
		if i, ok := integer(x); ok {
			s = strconv.FormatInt(i, 10)
		} else if f, ok := x.(float64); ok {
			s = strconv.FormatFloat(f, 'f', -1, 64)
		} else {
			return resource.Quantity{}, fmt.Errorf("%v is not a quantity", v)
		}
	default:
		return resource.Quantity{}, fmt.Errorf("a %T, want a quantity", v)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%q is not a quantity: %w", truncate(s), err)
	}
	if q.Sign() < 0 {
		return resource.Quantity{}, fmt.Errorf("%s is negative", q.String())
	}
	return q, nil
}

// event records an event on obj when the Grouper has a recorder.
func (g *Grouper) event(obj *unstructured.Unstructured, typ, reason, msg string) {
	g.mu.Lock()
	r := g.recorder
	g.mu.Unlock()
	if r != nil {
		r.Event(obj, typ, reason, msg)
	}
}
