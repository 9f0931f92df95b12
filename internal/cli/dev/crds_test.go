package dev

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestWriteEmbeddedCRDs(t *testing.T) {
	dir, err := writeEmbeddedCRDs(filepath.Join(t.TempDir(), "crds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, kind string }{
		{queueCRDFile, "Queue"},
		{"scheduling.gpuplane.io_podgroups.yaml", "PodGroup"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var crd struct {
				Kind string `json:"kind"`
				Spec struct {
					Group string `json:"group"`
					Names struct {
						Kind string `json:"kind"`
					} `json:"names"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(b, &crd); err != nil {
				t.Fatal(err)
			}
			if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != "scheduling.gpuplane.io" || crd.Spec.Names.Kind != tc.kind {
				t.Errorf("%s: %+v, want the %s CRD of scheduling.gpuplane.io", tc.file, crd, tc.kind)
			}
		})
	}
}
