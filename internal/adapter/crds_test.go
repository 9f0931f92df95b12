package adapter

import (
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func queueCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	all, err := ownCRDs()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(c *apiextensionsv1.CustomResourceDefinition) bool { return c.Spec.Names.Plural == "queues" })
	if i < 0 || len(all) != 4 {
		t.Fatalf("built-in CRDs: %d, want Queue, PodGroup, GroupingRule and Topology", len(all))
	}
	return all[i]
}

func specProps(c *apiextensionsv1.CustomResourceDefinition) map[string]apiextensionsv1.JSONSchemaProps {
	return c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
}

func TestMissingFields(t *testing.T) {
	want := queueCRD(t)
	if got := missingFields(want, want); len(got) != 0 {
		t.Fatalf("a CRD lacks %v of itself", got)
	}
	field := slices.Sorted(func(yield func(string) bool) {
		for k := range specProps(want) {
			if !yield(k) {
				return
			}
		}
	})[0]
	t.Run("older: a field less", func(t *testing.T) {
		older := want.DeepCopy()
		delete(specProps(older), field)
		got := missingFields(older, want)
		if len(got) != 1 || !strings.HasSuffix(got[0], ".spec."+field) {
			t.Errorf("missing %v, want the one path ending .spec.%s", got, field)
		}
	})
	t.Run("newer: a field more", func(t *testing.T) {
		newer := want.DeepCopy()
		specProps(newer)["addedLater"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		if got := missingFields(newer, want); len(got) != 0 {
			t.Errorf("a newer CRD lacks %v", got)
		}
	})
	t.Run("another type", func(t *testing.T) {
		changed := want.DeepCopy()
		p := specProps(changed)[field]
		p.Type = "boolean"
		if p.Type == specProps(want)[field].Type {
			p.Type = "string"
		}
		p.Properties = nil
		specProps(changed)[field] = p
		if got := missingFields(changed, want); len(got) != 1 || !strings.Contains(got[0], "installed "+p.Type) {
			t.Errorf("missing %v, want the field's type named", got)
		}
	})
	t.Run("version not served", func(t *testing.T) {
		off := want.DeepCopy()
		off.Spec.Versions[0].Served = false
		if got := missingFields(off, want); len(got) != 1 || !strings.HasPrefix(got[0], "version ") {
			t.Errorf("missing %v, want the version", got)
		}
	})
	t.Run("no status subresource", func(t *testing.T) {
		bare := want.DeepCopy()
		bare.Spec.Versions[0].Subresources = nil
		if got := missingFields(bare, want); len(got) != 1 || !strings.Contains(got[0], "status subresource") {
			t.Errorf("missing %v, want the status subresource", got)
		}
	})
}
