package grouper

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// TopologyLevels returns the levels of the Topology named name, or with
// name "" of the cluster's Topology, and the name it was found under. The
// scheduler's cache of Topology objects answers it.
type TopologyLevels func(name string) (resolved string, levels []string, err error)

// hostnameLabel is the level of single nodes, below every tier of a
// network.
const hostnameLabel = "kubernetes.io/hostname"

// workloadPodGroupKind is the Kubernetes Workload API's PodGroup.
const workloadPodGroupGroup = "scheduling.k8s.io"

// workloadTopology works out the topology constraint of the group made
// for workload top under rule r: what the workload's own annotations say
// (gpuplane's, Kueue's or KAI's), else the Workload API PodGroup's
// spec.schedulingConstraints.topology, else the rule's spec.topology; nil
// for none. The pods' own annotations come before all of these (the
// scheduler reads them): this is the group's default. Its errors name the
// field and what to change.
func workloadTopology(top *unstructured.Unstructured, r *Rule) (*v1alpha1.TopologyConstraint, string, error) {
	tc, err := v1alpha1.TopologyFromAnnotations(top.GetAnnotations())
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", top.GetKind(), top.GetName(), err)
	}
	if tc != nil {
		return tc, "topology from the workload's annotations", nil
	}
	if top.GroupVersionKind().Group == workloadPodGroupGroup && top.GetKind() == "PodGroup" {
		tc, err := workloadAPITopology(top.Object)
		if err != nil {
			return nil, "", fmt.Errorf("%s %s: %w", top.GetKind(), top.GetName(), err)
		}
		if tc != nil {
			return tc, "topology from spec.schedulingConstraints.topology", nil
		}
	}
	if r != nil && !r.Spec.Topology.IsZero() {
		return r.Spec.Topology.DeepCopy(), fmt.Sprintf("topology from %s spec.topology", r.Name), nil
	}
	return nil, "", nil
}

// workloadAPITopology reads a Kubernetes Workload API PodGroup's topology
// constraint (KEP-5732, scheduling.k8s.io/v1alpha2 or v1alpha3, behind the
// TopologyAwareWorkloadScheduling feature gate):
// spec.schedulingConstraints.topology[0].key, the level every pod of the
// group shares one domain of (a required level).
func workloadAPITopology(obj map[string]any) (*v1alpha1.TopologyConstraint, error) {
	spec, _ := obj["spec"].(map[string]any)
	sc, _ := spec["schedulingConstraints"].(map[string]any)
	raw, ok := sc["topology"]
	if !ok || raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	switch {
	case !ok:
		return nil, fmt.Errorf("spec.schedulingConstraints.topology: a %T, want a list", raw)
	case len(list) == 0:
		return nil, nil
	case len(list) > 1:
		return nil, fmt.Errorf("spec.schedulingConstraints.topology: %d constraints, at most 1", len(list))
	}
	c, _ := list[0].(map[string]any)
	key, _ := c["key"].(string)
	tc := &v1alpha1.TopologyConstraint{Required: key}
	if err := tc.Check("spec.schedulingConstraints.topology[0]"); err != nil {
		if key == "" {
			return nil, errors.New("spec.schedulingConstraints.topology[0].key: required, the node label key every pod shares a value of")
		}
		return nil, err
	}
	return tc, nil
}

// VolcanoTopology maps a Volcano PodGroup's or Job's spec.networkTopology
// onto the levels of the cluster's Topology (or the one the object's
// scheduling.gpuplane.io/topology annotation names): Volcano counts tiers
// of HyperNodes from the nodes up, tier 1 the narrowest, so tier 1 is the
// narrowest level above the host (the last level, or the one before
// kubernetes.io/hostname when that is last), tier 2 the level above it,
// and so on. mode hard (the default) requires the gang inside one domain
// of tier highestTierAllowed (default 1); mode soft prefers one domain of
// that tier. highestTierName, which names a HyperNode tier gpuplane has no
// notion of, is refused. nil for no networkTopology. Its errors name the
// field.
func VolcanoTopology(obj map[string]any, annotations map[string]string, levels TopologyLevels) (*v1alpha1.TopologyConstraint, string, error) {
	spec, _ := obj["spec"].(map[string]any)
	raw, ok := spec["networkTopology"]
	if !ok || raw == nil {
		return nil, "", nil
	}
	nt, ok := raw.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("spec.networkTopology: a %T, want an object with mode and highestTierAllowed", raw)
	}
	mode := "hard"
	if m, ok := nt["mode"]; ok && m != nil {
		s, _ := m.(string)
		switch s {
		case "hard", "soft":
			mode = s
		case "":
		default:
			return nil, "", fmt.Errorf("spec.networkTopology.mode: %v, want hard or soft", truncate(fmt.Sprint(m)))
		}
	}
	if n, ok := nt["highestTierName"]; ok && n != nil && n != "" {
		return nil, "", errors.New("spec.networkTopology.highestTierName: a HyperNode tier's name is not read; give the tier by number (highestTierAllowed: 1 is the narrowest level above the host of the cluster's Topology)")
	}
	tier := int64(1)
	if t, ok := nt["highestTierAllowed"]; ok && t != nil {
		n, ok := integer(t)
		if !ok || n < 1 {
			return nil, "", fmt.Errorf("spec.networkTopology.highestTierAllowed: %v, want a tier from 1 (the narrowest level above the host)", truncate(fmt.Sprint(t)))
		}
		tier = n
	}
	name := annotations[v1alpha1.TopologyAnnotation]
	resolved, lv, err := levels(name)
	if err != nil {
		return nil, "", fmt.Errorf("spec.networkTopology: %w", err)
	}
	tiers := lv
	if len(tiers) > 0 && tiers[len(tiers)-1] == hostnameLabel {
		tiers = tiers[:len(tiers)-1]
	}
	if tier > int64(len(tiers)) {
		return nil, "", fmt.Errorf("spec.networkTopology.highestTierAllowed: %d, but Topology %s has %d tiers above the host (%s, narrowest first): use 1 to %d",
			tier, resolved, len(tiers), strings.Join(reversed(tiers), ", "), len(tiers))
	}
	level := tiers[int64(len(tiers))-tier]
	tc := &v1alpha1.TopologyConstraint{Name: resolved}
	if mode == "hard" {
		tc.Required = level
	} else {
		tc.Preferred = level
	}
	return tc, fmt.Sprintf("topology from spec.networkTopology (%s, tier %d = %s of Topology %s)", mode, tier, level, resolved), nil
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
