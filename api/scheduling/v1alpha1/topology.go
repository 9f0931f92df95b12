package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The annotations by which a pod, or the workload a PodGroup is derived
// from, places its gang by the network's topology: gpuplane's own, and
// Kueue's and KAI's, read as written (docs/topology.md).
const (
	// TopologyAnnotation names the Topology (TopologyConstraint.Name).
	TopologyAnnotation = "scheduling.gpuplane.io/topology"
	// TopologyRequiredAnnotation is the required level's node label key.
	TopologyRequiredAnnotation = "scheduling.gpuplane.io/topology-required"
	// TopologyPreferredAnnotation is the preferred level's node label key.
	TopologyPreferredAnnotation = "scheduling.gpuplane.io/topology-preferred"
	// TopologySliceRequiredAnnotation is the slices' level.
	TopologySliceRequiredAnnotation = "scheduling.gpuplane.io/topology-slice-required"
	// TopologySliceSizeAnnotation is the pods per slice.
	TopologySliceSizeAnnotation = "scheduling.gpuplane.io/topology-slice-size"

	// KueueRequiredTopologyAnnotation is Kueue's required level, on a pod
	// template.
	KueueRequiredTopologyAnnotation = "kueue.x-k8s.io/podset-required-topology"
	// KueuePreferredTopologyAnnotation is Kueue's preferred level.
	KueuePreferredTopologyAnnotation = "kueue.x-k8s.io/podset-preferred-topology"
	// KueueSliceRequiredTopologyAnnotation is Kueue's slice level.
	KueueSliceRequiredTopologyAnnotation = "kueue.x-k8s.io/podset-slice-required-topology"
	// KueueSliceSizeAnnotation is Kueue's slice size.
	KueueSliceSizeAnnotation = "kueue.x-k8s.io/podset-slice-size"
	// KueueSliceConstraintsAnnotation is Kueue's multi-layer slices, which
	// gpuplane refuses rather than drops (it places one slice level).
	KueueSliceConstraintsAnnotation = "kueue.x-k8s.io/podset-slice-required-topology-constraints"

	// KAITopologyAnnotation names a KAI Topology, on the workload.
	KAITopologyAnnotation = "kai.scheduler/topology"
	// KAIRequiredPlacementAnnotation is KAI's required level.
	KAIRequiredPlacementAnnotation = "kai.scheduler/topology-required-placement"
	// KAIPreferredPlacementAnnotation is KAI's preferred level.
	KAIPreferredPlacementAnnotation = "kai.scheduler/topology-preferred-placement"
)

// MaxSliceSize bounds a slice size, as PodGroup spec.minMember is bounded.
const MaxSliceSize = 100000

// TopologyAnnotations are every annotation TopologyFromAnnotations reads.
var TopologyAnnotations = []string{
	TopologyAnnotation, TopologyRequiredAnnotation, TopologyPreferredAnnotation, TopologySliceRequiredAnnotation, TopologySliceSizeAnnotation,
	KueueRequiredTopologyAnnotation, KueuePreferredTopologyAnnotation, KueueSliceRequiredTopologyAnnotation, KueueSliceSizeAnnotation,
	KueueSliceConstraintsAnnotation, KAITopologyAnnotation, KAIRequiredPlacementAnnotation, KAIPreferredPlacementAnnotation,
}

// topologyDialect is one scheduler's names for the fields of a
// TopologyConstraint; "" where it has none.
type topologyDialect struct {
	name, required, preferred, sliceRequired, sliceSize string
}

// topologyDialects in precedence order: gpuplane's own, Kueue's, KAI's.
var topologyDialects = []topologyDialect{
	{TopologyAnnotation, TopologyRequiredAnnotation, TopologyPreferredAnnotation, TopologySliceRequiredAnnotation, TopologySliceSizeAnnotation},
	{"", KueueRequiredTopologyAnnotation, KueuePreferredTopologyAnnotation, KueueSliceRequiredTopologyAnnotation, KueueSliceSizeAnnotation},
	{KAITopologyAnnotation, KAIRequiredPlacementAnnotation, KAIPreferredPlacementAnnotation, "", ""},
}

// TopologyFromAnnotations reads the topology constraint a pod or a
// workload states through its annotations, in gpuplane's, Kueue's or KAI's
// words; nil when it states none. The dialects may be mixed (Kueue's
// levels with gpuplane's topology name), but two annotations that give one
// field different values are an error, as is a value that cannot be a
// label key, a name or a slice size: the error names the annotation and
// what to change. The levels are checked against a topology later, when
// the constraint is resolved (TopologyConstraint.Check for the rest).
func TopologyFromAnnotations(annotations map[string]string) (*TopologyConstraint, error) {
	if _, ok := annotations[KueueSliceConstraintsAnnotation]; ok {
		return nil, fmt.Errorf("annotation %s: slices in several layers are not placed by gpuplane; give one slice level with %s and %s",
			KueueSliceConstraintsAnnotation, KueueSliceRequiredTopologyAnnotation, KueueSliceSizeAnnotation)
	}
	var out TopologyConstraint
	var from [5]string // the annotation each field came from
	set := func(i int, dst *string, key string, check func(string) []string) error {
		if key == "" {
			return nil
		}
		v, ok := annotations[key]
		if !ok {
			return nil
		}
		v = strings.TrimSpace(v)
		if v == "" {
			return fmt.Errorf("annotation %s: empty; remove it or give a value", key)
		}
		if errs := check(v); len(errs) > 0 {
			return fmt.Errorf("annotation %s: %q %s", key, clip(v), strings.Join(errs, "; "))
		}
		if from[i] != "" && *dst != v {
			return fmt.Errorf("annotation %s says %q but %s says %q: remove one of them or make them agree", from[i], clip(*dst), key, clip(v))
		}
		if from[i] == "" {
			*dst, from[i] = v, key
		}
		return nil
	}
	var size string
	for _, d := range topologyDialects {
		for _, f := range []struct {
			i     int
			dst   *string
			key   string
			check func(string) []string
		}{
			{0, &out.Name, d.name, isName},
			{1, &out.Required, d.required, isLevel},
			{2, &out.Preferred, d.preferred, isLevel},
			{3, &out.SliceRequired, d.sliceRequired, isLevel},
			{4, &size, d.sliceSize, isSliceSize},
		} {
			if err := set(f.i, f.dst, f.key, f.check); err != nil {
				return nil, err
			}
		}
	}
	if size != "" {
		n, _ := strconv.Atoi(size)
		out.SliceSize = int32(n)
	}
	if out.IsZero() {
		return nil, nil
	}
	if err := out.Check("annotations"); err != nil {
		return nil, err
	}
	return &out, nil
}

// Check reports the first field of c that is malformed, named relative to
// field: a name that cannot be an object's, a level that cannot be a label
// key, a slice size out of bounds or without a slice level. Whether the
// levels are levels of the topology is the resolver's to say.
func (c *TopologyConstraint) Check(field string) error {
	if c == nil {
		return nil
	}
	if c.Name != "" {
		if errs := isName(c.Name); len(errs) > 0 {
			return fmt.Errorf("%s.name: %q %s", field, clip(c.Name), strings.Join(errs, "; "))
		}
	}
	for _, f := range []struct{ name, v string }{{"required", c.Required}, {"preferred", c.Preferred}, {"sliceRequired", c.SliceRequired}} {
		if f.v == "" {
			continue
		}
		if errs := isLevel(f.v); len(errs) > 0 {
			return fmt.Errorf("%s.%s: %q %s", field, f.name, clip(f.v), strings.Join(errs, "; "))
		}
	}
	switch {
	case c.SliceSize < 0 || c.SliceSize > MaxSliceSize:
		return fmt.Errorf("%s.sliceSize: %d, want 1 to %d", field, c.SliceSize, MaxSliceSize)
	case c.SliceSize > 0 && c.SliceRequired == "":
		return fmt.Errorf("%s.sliceSize: a slice size needs sliceRequired, the level each slice sits in", field)
	case c.Required == "" && c.Preferred == "" && c.SliceRequired == "":
		return fmt.Errorf("%s: names no level: set required, preferred or sliceRequired to a node label key of the topology", field)
	}
	return nil
}

func isName(v string) []string {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return []string{"is not a Topology's name: " + strings.Join(errs, "; ")}
	}
	return nil
}

func isLevel(v string) []string {
	if errs := validation.IsQualifiedName(v); len(errs) > 0 {
		return []string{"is not a node label key: " + strings.Join(errs, "; ")}
	}
	return nil
}

func isSliceSize(v string) []string {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxSliceSize {
		return []string{fmt.Sprintf("is not a slice size: want a whole number of pods from 1 to %d", MaxSliceSize)}
	}
	return nil
}

func clip(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// ConvertedFromAnnotation on a Topology made by `gpuplane topology
// convert` names the object it was made from ("kueue.x-k8s.io/v1beta2
// Topology default").
const ConvertedFromAnnotation = "scheduling.gpuplane.io/converted-from"
