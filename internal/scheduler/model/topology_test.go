package model

import (
	"strings"
	"testing"
)

func TestGangTopologyCheck(t *testing.T) {
	levels := []string{"block", "rack", "nvidia.com/gpu.clique", "kubernetes.io/hostname"}
	for _, c := range []struct {
		name string
		t    GangTopology
		want string // "" for valid, else a substring of the error
	}{
		{"required", GangTopology{Levels: levels, Required: "rack"}, ""},
		{"required and narrower preferred", GangTopology{Levels: levels, Required: "block", Preferred: "rack"}, ""},
		{"sliced by size", GangTopology{Levels: levels, Required: "block", SliceRequired: "rack", SliceSize: 4}, ""},
		{"sliced by sub-group", GangTopology{Levels: levels, Preferred: "rack", SliceRequired: "nvidia.com/gpu.clique"}, ""},
		{"no levels", GangTopology{Required: "rack"}, "t.levels: must name"},
		{"empty level", GangTopology{Levels: []string{"rack", ""}}, "t.levels[1]: must be a node label key"},
		{"repeated level", GangTopology{Levels: []string{"rack", "rack"}}, `t.levels[1]: "rack" is levels[0]`},
		{"unknown required", GangTopology{Levels: levels, Required: "zone"}, `t.required: "zone" is not one of the levels`},
		{"unknown preferred", GangTopology{Levels: levels, Preferred: "zone"}, `t.preferred: "zone"`},
		{"preferred wider", GangTopology{Levels: levels, Required: "rack", Preferred: "block"}, "t.preferred: \"block\" is wider"},
		{"slice wider", GangTopology{Levels: levels, Required: "rack", SliceRequired: "block", SliceSize: 2}, "t.sliceRequired: \"block\" is wider"},
		{"negative slice", GangTopology{Levels: levels, Required: "rack", SliceRequired: "rack", SliceSize: -1}, "t.sliceSize: must be at least 0"},
		{"size without level", GangTopology{Levels: levels, Required: "rack", SliceSize: 2}, "t.sliceSize: a slice size needs sliceRequired"},
		{"too many levels", GangTopology{Levels: strings.Split("a b c d e f g h i j k l m n o p q", " ")}, "17 levels, at most 16"},
	} {
		err := c.t.Check("t")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
