package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdPage lists every field of gpuplane's CRDs from their OpenAPI schemas
// (deploy/crds, generated from api/scheduling by controller-gen): its type,
// bounds and description.
func crdPage(root string, out Pages) error {
	files, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRDs in %s", filepath.Join(root, "deploy", "crds"))
	}
	sort.Strings(files)
	var b strings.Builder
	b.WriteString(header("CRD API", "the CRDs' OpenAPI schemas in deploy/crds"))
	b.WriteString("gpuplane's custom resources, generated from the Go types of `api/scheduling/v1alpha1`. Each field's\n" +
		"description is its Go comment; bounds are those the API server enforces.\n\n")
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	for _, crd := range crds {
		fmt.Fprintf(&b, "- [%s](#%s)\n", crd.Spec.Names.Kind, strings.ToLower(crd.Spec.Names.Kind))
	}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return fmt.Errorf("%s %s: no schema", crd.Name, v.Name)
			}
			fmt.Fprintf(&b, "\n## %s\n\n`%s/%s`, %s", crd.Spec.Names.Kind, crd.Spec.Group, v.Name, strings.ToLower(string(crd.Spec.Scope)))
			if len(crd.Spec.Names.ShortNames) > 0 {
				fmt.Fprintf(&b, ", short names %s", code(strings.Join(crd.Spec.Names.ShortNames, "`, `")))
			}
			b.WriteString(".\n\n")
			if d := v.Schema.OpenAPIV3Schema.Description; d != "" {
				b.WriteString(cell(d) + "\n\n")
			}
			b.WriteString("| field | type | description |\n| --- | --- | --- |\n")
			s := v.Schema.OpenAPIV3Schema
			for _, top := range []string{"spec", "status"} {
				if p, ok := s.Properties[top]; ok {
					fields(&b, top, p, contains(s.Required, top))
				}
			}
		}
	}
	out[Dir+"/crds.md"] = []byte(b.String())
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fields writes a row for the field at path and, below it, one for each of
// its fields (of a list's items, as path[]).
func fields(b *strings.Builder, path string, s apiextensionsv1.JSONSchemaProps, required bool) {
	fmt.Fprintf(b, "| `%s` | %s | %s |\n", path, typeOf(s), cell(describe(s, required)))
	switch {
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
		item := *s.Items.Schema
		for _, name := range sortedKeys(item.Properties) {
			fields(b, path+"[]."+name, item.Properties[name], contains(item.Required, name))
		}
	default:
		for _, name := range sortedKeys(s.Properties) {
			fields(b, path+"."+name, s.Properties[name], contains(s.Required, name))
		}
	}
}

func typeOf(s apiextensionsv1.JSONSchemaProps) string {
	switch {
	case s.XIntOrString:
		return "int or string"
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
		return "[]" + typeOf(*s.Items.Schema)
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		return "map[string]" + typeOf(*s.AdditionalProperties.Schema)
	case s.Type == "":
		return "any"
	}
	return s.Type
}

// describe is a field's description with its bounds.
func describe(s apiextensionsv1.JSONSchemaProps, required bool) string {
	var extra []string
	if required {
		extra = append(extra, "required")
	}
	if s.Default != nil {
		extra = append(extra, "default "+code(string(s.Default.Raw)))
	}
	if len(s.Enum) > 0 {
		var vals []string
		for _, e := range s.Enum {
			vals = append(vals, string(e.Raw))
		}
		extra = append(extra, "one of "+code(strings.Join(vals, ", ")))
	}
	if s.Minimum != nil {
		extra = append(extra, fmt.Sprintf("at least %g", *s.Minimum))
	}
	if s.Maximum != nil {
		extra = append(extra, fmt.Sprintf("at most %g", *s.Maximum))
	}
	if s.MinLength != nil {
		extra = append(extra, fmt.Sprintf("at least %d characters", *s.MinLength))
	}
	if s.MaxLength != nil {
		extra = append(extra, fmt.Sprintf("at most %d characters", *s.MaxLength))
	}
	if s.MinItems != nil {
		extra = append(extra, fmt.Sprintf("at least %d items", *s.MinItems))
	}
	if s.MaxItems != nil {
		extra = append(extra, fmt.Sprintf("at most %d items", *s.MaxItems))
	}
	if s.Pattern != "" {
		extra = append(extra, "matching "+code(s.Pattern))
	}
	for _, r := range s.XValidations {
		msg := r.Message
		if msg == "" {
			msg = r.Rule
		}
		extra = append(extra, "rule: "+msg)
	}
	d := s.Description
	if len(extra) > 0 {
		if d != "" {
			d += " "
		}
		d += "(" + strings.Join(extra, "; ") + ")"
	}
	return d
}
