package grouper

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

//go:embed defaults.yaml
var defaultsYAML []byte

// Builtin compiles the rules gpuplane-scheduler ships (defaults.yaml): they
// are GroupingRules like any other, so `kubectl get groupingrules -o yaml`
// of a replacement reads the same.
func Builtin() ([]*Rule, error) {
	var objs []v1alpha1.GroupingRule
	if err := yaml.UnmarshalStrict(defaultsYAML, &objs); err != nil {
		return nil, fmt.Errorf("the shipped grouping rules: %w", err)
	}
	out := make([]*Rule, 0, len(objs))
	for _, o := range objs {
		r, err := Compile("builtin/"+o.Name, o.Spec)
		if err != nil {
			return nil, fmt.Errorf("the shipped grouping rule %s: %w", o.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
