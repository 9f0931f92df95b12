package helmchart

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// apis is what a cluster's discovery gives Helm, reduced to the kinds the
// chart's choices depend on; every cluster serves v1/Pod.
func apis(extra ...string) []string {
	base := []string{"v1", "v1/Pod", "apps/v1", "apps/v1/DaemonSet", "admissionregistration.k8s.io/v1",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding"}
	return append(base, extra...)
}

var (
	mapV1      = []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding"}
	mapV1beta1 = []string{"admissionregistration.k8s.io/v1beta1", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicyBinding"}
	draV1 = []string{"resource.k8s.io/v1", "resource.k8s.io/v1/DeviceClass", "resource.k8s.io/v1/ResourceSlice"}
)

// kinds counts the rendered objects by apiVersion and kind.
func kinds(t *testing.T, r Rendered) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, text := range r {
		for doc := range strings.SplitSeq(text, "\n---") {
			var obj struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if obj.Kind != "" {
				out[obj.APIVersion+" "+obj.Kind]++
			}
		}
	}
	return out
}

// The chart renders by what the cluster serves: admission policies at the
// MutatingAdmissionPolicy version served, or not at all; DeviceClasses
// only with resource.k8s.io/v1; and NOTES.txt says what is off and why.
func TestRendersByServedAPIs(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	const (
		mapPolicy = " MutatingAdmissionPolicy"
		binding   = " MutatingAdmissionPolicyBinding"
	)
	cases := []struct {
		name       string
		version    string
		apis       []string
		mapAt      string // apiVersion of the MutatingAdmissionPolicies, "" for none
		classes    bool
		notesOff   []string
		notesClean []string
	}{
		{"1.37", "v1.37.2", apis(append(mapV1, draV1...)...), "admissionregistration.k8s.io/v1", true,
			nil, []string{"Off on this cluster"}},
		{"1.34 defaults", "v1.34.4", apis(draV1...), "", true,
			[]string{"Off on this cluster: admission.hideGPUs, admission.gpuFractionDevice, admission.schedulingGate", "FractionWithoutGPU", "gpuplane doctor cluster"},
			[]string{"DRA (agent.dra)"}},
		{"1.35 with MutatingAdmissionPolicy beta", "v1.35.4", apis(append(mapV1beta1, draV1...)...), "admissionregistration.k8s.io/v1beta1", true,
			nil, []string{"Off on this cluster"}},
		{"without DRA", "v1.34.4", apis(mapV1...), "admissionregistration.k8s.io/v1", false,
			[]string{"Off on this cluster: DRA (agent.dra)", "resource.k8s.io/v1"}, []string{"admission.hideGPUs"}},
		{"helm template --kube-version 1.34", "v1.34.0", nil, "", true, []string{"admission.hideGPUs"}, nil},
		{"helm template --kube-version 1.36", "v1.36.0", nil, "admissionregistration.k8s.io/v1", true, nil, []string{"Off on this cluster"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			caps, err := ServedCapabilities(tc.version, tc.apis...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.apis == nil {
				caps = ManifestCapabilities()
				caps.KubeVersion.Version = tc.version
			}
			r, notes, err := RenderFor(c, nil, "gpuplane", DefaultNamespace, caps)
			if err != nil {
				t.Fatal(err)
			}
			got := kinds(t, r)
			for _, v := range []string{"admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1"} {
				want := 0
				if v == tc.mapAt {
					want = 3 // hideGPUs, gpuFractionDevice and schedulingGate are on by default
				}
				if got[v+mapPolicy] != want || got[v+binding] != want {
					t.Errorf("%d MutatingAdmissionPolicies and %d bindings at %s, want %d", got[v+mapPolicy], got[v+binding], v, want)
				}
			}
			if got["admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy"] == 0 {
				t.Error("no ValidatingAdmissionPolicy rendered: those are served from 1.30 on and never left out")
			}
			if has := got["resource.k8s.io/v1 DeviceClass"] > 0; has != tc.classes {
				t.Errorf("DeviceClasses rendered: %v, want %v", has, tc.classes)
			}
			for _, s := range tc.notesOff {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt does not say %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.notesClean {
				if strings.Contains(notes, s) {
					t.Errorf("NOTES.txt says %q where nothing is off:\n%s", s, notes)
				}
			}
		})
	}
}
