package grouper

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// fixedLevels answers for the Topologies named in m; "" is the default.
func fixedLevels(m map[string][]string) TopologyLevels {
	return func(name string) (string, []string, error) {
		if name == "" {
			name = "default"
		}
		l, ok := m[name]
		if !ok {
			return "", nil, errors.New("topology " + name + " does not exist")
		}
		return name, l, nil
	}
}

// Volcano's tiers count up from the narrowest level above the host.
func TestVolcanoTopology(t *testing.T) {
	levels := fixedLevels(map[string][]string{
		"default": {"zone", "block", "rack", "kubernetes.io/hostname"},
		"nvl":     {"block", "nvidia.com/gpu.clique"},
	})
	for _, c := range []struct {
		name, spec string
		ann        map[string]string
		want       *v1alpha1.TopologyConstraint
		err        string
	}{
		{"none", `{"minMember": 2}`, nil, nil, ""},
		{"hard tier 1 is the rack", `{"networkTopology": {"mode": "hard", "highestTierAllowed": 1}}`, nil,
			&v1alpha1.TopologyConstraint{Name: "default", Required: "rack"}, ""},
		{"hard tier 2 is the block", `{"networkTopology": {"mode": "hard", "highestTierAllowed": 2}}`, nil,
			&v1alpha1.TopologyConstraint{Name: "default", Required: "block"}, ""},
		{"mode defaults to hard, tier to 1", `{"networkTopology": {}}`, nil, &v1alpha1.TopologyConstraint{Name: "default", Required: "rack"}, ""},
		{"soft prefers", `{"networkTopology": {"mode": "soft"}}`, nil, &v1alpha1.TopologyConstraint{Name: "default", Preferred: "rack"}, ""},
		{"soft with a tier", `{"networkTopology": {"mode": "soft", "highestTierAllowed": 3}}`, nil, &v1alpha1.TopologyConstraint{Name: "default", Preferred: "zone"}, ""},
		{"a named Topology without a host level", `{"networkTopology": {"highestTierAllowed": 1}}`, map[string]string{v1alpha1.TopologyAnnotation: "nvl"},
			&v1alpha1.TopologyConstraint{Name: "nvl", Required: "nvidia.com/gpu.clique"}, ""},
		{"tier above the top", `{"networkTopology": {"highestTierAllowed": 4}}`, nil, nil,
			"spec.networkTopology.highestTierAllowed: 4, but Topology default has 3 tiers above the host (rack, block, zone, narrowest first): use 1 to 3"},
		{"tier 0", `{"networkTopology": {"highestTierAllowed": 0}}`, nil, nil, "spec.networkTopology.highestTierAllowed: 0, want a tier from 1"},
		{"bad mode", `{"networkTopology": {"mode": "firm"}}`, nil, nil, "spec.networkTopology.mode: firm, want hard or soft"},
		{"tier by name", `{"networkTopology": {"highestTierName": "spine"}}`, nil, nil, "spec.networkTopology.highestTierName: a HyperNode tier's name is not read"},
		{"not an object", `{"networkTopology": "hard"}`, nil, nil, "spec.networkTopology: a string, want an object"},
		{"unknown Topology", `{"networkTopology": {}}`, map[string]string{v1alpha1.TopologyAnnotation: "nope"}, nil, "spec.networkTopology: topology nope does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var spec any
			if err := json.Unmarshal([]byte(c.spec), &spec); err != nil {
				t.Fatal(err)
			}
			got, why, err := VolcanoTopology(map[string]any{"spec": intsOf(spec)}, c.ann, levels)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case (got == nil) != (c.want == nil) || got != nil && *got != *c.want:
				t.Fatalf("got %+v, want %+v", got, c.want)
			case got != nil && !strings.Contains(why, "spec.networkTopology"):
				t.Fatalf("explain %q does not say where it came from", why)
			}
		})
	}
}

// A derived group takes its topology from the workload's annotations,
// else the Workload API PodGroup's constraint, else its rule.
func TestWorkloadTopology(t *testing.T) {
	rule, err := Compile("train", v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Group: "batch", Kind: "Job"}, MinMember: "2",
		Topology: &v1alpha1.TopologyConstraint{Name: "net", Preferred: "rack"}})
	if err != nil {
		t.Fatal(err)
	}
	obj := func(apiVersion, kind string, ann map[string]any, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]any{"name": "w", "namespace": "ns", "annotations": ann}, "spec": spec}}
	}
	for _, c := range []struct {
		name string
		top  *unstructured.Unstructured
		r    *Rule
		want *v1alpha1.TopologyConstraint
		err  string
	}{
		{"KAI's annotations on the workload", obj("batch/v1", "Job", map[string]any{v1alpha1.KAITopologyAnnotation: "kai-net",
			v1alpha1.KAIRequiredPlacementAnnotation: "block", v1alpha1.KAIPreferredPlacementAnnotation: "rack"}, nil), rule,
			&v1alpha1.TopologyConstraint{Name: "kai-net", Required: "block", Preferred: "rack"}, ""},
		{"the rule's default", obj("batch/v1", "Job", nil, nil), rule, &v1alpha1.TopologyConstraint{Name: "net", Preferred: "rack"}, ""},
		{"none", obj("batch/v1", "Job", nil, nil), nil, nil, ""},
		{"the Workload API's constraint", obj("scheduling.k8s.io/v1alpha2", "PodGroup", nil,
			map[string]any{"schedulingConstraints": map[string]any{"topology": []any{map[string]any{"key": "example.com/rack"}}}}), nil,
			&v1alpha1.TopologyConstraint{Required: "example.com/rack"}, ""},
		{"the Workload API's constraint without a key", obj("scheduling.k8s.io/v1alpha2", "PodGroup", nil,
			map[string]any{"schedulingConstraints": map[string]any{"topology": []any{map[string]any{}}}}), nil, nil,
			"spec.schedulingConstraints.topology[0].key: required"},
		{"the Workload API's bad key", obj("scheduling.k8s.io/v1alpha2", "PodGroup", nil,
			map[string]any{"schedulingConstraints": map[string]any{"topology": []any{map[string]any{"key": "a b"}}}}), nil, nil,
			`spec.schedulingConstraints.topology[0].required: "a b" is not a node label key`},
		{"bad annotation", obj("batch/v1", "Job", map[string]any{v1alpha1.KAIRequiredPlacementAnnotation: "a b"}, nil), rule, nil,
			"Job w: annotation kai.scheduler/topology-required-placement"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := workloadTopology(c.top, c.r)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case (got == nil) != (c.want == nil) || got != nil && *got != *c.want:
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// A Volcano PodGroup's networkTopology is cluster input: whatever it
// holds, VolcanoTopology returns an error or a constraint naming one
// level of the Topology, and never panics.
func FuzzVolcanoTopology(f *testing.F) {
	for _, seed := range []string{
		`{"networkTopology": {"mode": "hard", "highestTierAllowed": 2}}`, `{"networkTopology": {"mode": "soft"}}`,
		`{"networkTopology": {"highestTierAllowed": -1}}`, `{"networkTopology": {"highestTierAllowed": 1e300}}`,
		`{"networkTopology": {"highestTierName": "x"}}`, `{"networkTopology": null}`, `{"networkTopology": [1]}`, `null`,
	} {
		f.Add([]byte(seed))
	}
	levels := []string{"zone", "block", "rack", "kubernetes.io/hostname"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec any
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		tc, _, err := VolcanoTopology(map[string]any{"spec": intsOf(spec)}, nil, fixedLevels(map[string][]string{"default": levels}))
		if err != nil || tc == nil {
			return
		}
		level := tc.Required + tc.Preferred
		if (tc.Required == "") == (tc.Preferred == "") || level == "kubernetes.io/hostname" || !strings.Contains(strings.Join(levels, " "), level) {
			t.Fatalf("constraint %+v for %s", tc, data)
		}
	})
}
