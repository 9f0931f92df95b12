package v1alpha1

import (
	"strings"
	"testing"
)

func TestTopologyFromAnnotations(t *testing.T) {
	const rack, block, host = "example.com/rack", "example.com/block", "kubernetes.io/hostname"
	for _, c := range []struct {
		name string
		in   map[string]string
		want *TopologyConstraint
		err  string // substring of the error, "" for none
	}{
		{"none", map[string]string{"other": "x"}, nil, ""},
		{"gpuplane's", map[string]string{TopologyAnnotation: "net", TopologyRequiredAnnotation: block, TopologyPreferredAnnotation: rack,
			TopologySliceRequiredAnnotation: host, TopologySliceSizeAnnotation: "2"},
			&TopologyConstraint{Name: "net", Required: block, Preferred: rack, SliceRequired: host, SliceSize: 2}, ""},
		{"Kueue's", map[string]string{KueueRequiredTopologyAnnotation: block, KueueSliceRequiredTopologyAnnotation: rack, KueueSliceSizeAnnotation: "4"},
			&TopologyConstraint{Required: block, SliceRequired: rack, SliceSize: 4}, ""},
		{"Kueue's preferred", map[string]string{KueuePreferredTopologyAnnotation: rack}, &TopologyConstraint{Preferred: rack}, ""},
		{"Kueue's slice alone", map[string]string{KueueSliceRequiredTopologyAnnotation: rack}, &TopologyConstraint{SliceRequired: rack}, ""},
		{"KAI's", map[string]string{KAITopologyAnnotation: "cluster-topology", KAIRequiredPlacementAnnotation: block, KAIPreferredPlacementAnnotation: rack},
			&TopologyConstraint{Name: "cluster-topology", Required: block, Preferred: rack}, ""},
		{"dialects agree", map[string]string{KueueRequiredTopologyAnnotation: rack, KAIRequiredPlacementAnnotation: rack}, &TopologyConstraint{Required: rack}, ""},
		{"mixed dialects", map[string]string{TopologyAnnotation: "net", KueueRequiredTopologyAnnotation: rack}, &TopologyConstraint{Name: "net", Required: rack}, ""},
		{"dialects disagree", map[string]string{KueueRequiredTopologyAnnotation: rack, KAIRequiredPlacementAnnotation: block},
			nil, "annotation kueue.x-k8s.io/podset-required-topology says \"example.com/rack\" but kai.scheduler/topology-required-placement says \"example.com/block\""},
		{"names disagree", map[string]string{TopologyAnnotation: "a", KAITopologyAnnotation: "b", KAIRequiredPlacementAnnotation: rack}, nil, "kai.scheduler/topology says \"b\""},
		{"bad level", map[string]string{KueueRequiredTopologyAnnotation: "not a key!"}, nil, "annotation kueue.x-k8s.io/podset-required-topology: \"not a key!\" is not a node label key"},
		{"empty level", map[string]string{KAIRequiredPlacementAnnotation: " "}, nil, "annotation kai.scheduler/topology-required-placement: empty"},
		{"bad name", map[string]string{KAITopologyAnnotation: "Net_1", KAIRequiredPlacementAnnotation: rack}, nil, "annotation kai.scheduler/topology: \"Net_1\" is not a Topology's name"},
		{"zero slice", map[string]string{KueueSliceRequiredTopologyAnnotation: rack, KueueSliceSizeAnnotation: "0"}, nil, "annotation kueue.x-k8s.io/podset-slice-size: \"0\" is not a slice size"},
		{"huge slice", map[string]string{KueueSliceRequiredTopologyAnnotation: rack, KueueSliceSizeAnnotation: "100001"}, nil, "is not a slice size"},
		{"size without level", map[string]string{KueueRequiredTopologyAnnotation: rack, KueueSliceSizeAnnotation: "2"}, nil, "annotations.sliceSize: a slice size needs sliceRequired"},
		{"name without level", map[string]string{KAITopologyAnnotation: "net"}, nil, "annotations: names no level"},
		{"Kueue's multi-layer slices", map[string]string{KueueRequiredTopologyAnnotation: block, KueueSliceConstraintsAnnotation: `[{"topology":"` + rack + `","size":2}]`},
			nil, "annotation kueue.x-k8s.io/podset-slice-required-topology-constraints: slices in several layers are not placed by gpuplane"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := TopologyFromAnnotations(c.in)
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

// FuzzTopologyAnnotations holds the annotation parser to its contract on
// any input: no panic, and a constraint it returns passes Check with each
// level a label key and the slice size in bounds.
func FuzzTopologyAnnotations(f *testing.F) {
	f.Add("net", "example.com/block", "example.com/rack", "kubernetes.io/hostname", "4", "", "", "")
	f.Add("", "", "", "", "", "cloud.provider.com/topology-rack", "rack", "2")
	f.Add("x", "a/b/c", "", "", "-1", "", "", "99999999999999999999")
	f.Fuzz(func(t *testing.T, name, req, pref, slice, size, kueueReq, kaiPref, kueueSize string) {
		in := map[string]string{}
		for k, v := range map[string]string{TopologyAnnotation: name, TopologyRequiredAnnotation: req, TopologyPreferredAnnotation: pref,
			TopologySliceRequiredAnnotation: slice, TopologySliceSizeAnnotation: size, KueueRequiredTopologyAnnotation: kueueReq,
			KAIPreferredPlacementAnnotation: kaiPref, KueueSliceSizeAnnotation: kueueSize} {
			if v != "" {
				in[k] = v
			}
		}
		c, err := TopologyFromAnnotations(in)
		if err != nil {
			if c != nil {
				t.Fatalf("a constraint %+v with error %v", c, err)
			}
			return
		}
		if c == nil {
			return
		}
		if err := c.Check("c"); err != nil {
			t.Fatalf("returned %+v, which fails Check: %v", c, err)
		}
		if c.SliceSize < 0 || c.SliceSize > MaxSliceSize {
			t.Fatalf("slice size %d out of bounds", c.SliceSize)
		}
	})
}
