package doctor

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func TestCluster(t *testing.T) {
	dra := &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}}}
	mapV1 := &metav1.APIResourceList{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "mutatingadmissionpolicies"}}}
	workload := &metav1.APIResourceList{GroupVersion: "scheduling.k8s.io/v1alpha3", APIResources: []metav1.APIResource{{Name: "podgroups"}}}
	tests := []struct {
		name    string
		version version.Info
		served  []*metav1.APIResourceList
		checks  map[string]string // check name: result
		summary string
	}{
		{"1.34 defaults", version.Info{GitVersion: "v1.34.4", Minor: "34"}, []*metav1.APIResourceList{dra},
			map[string]string{"kubernetes version": OK, "dra": OK, "workload-api": Warn, "admission-policies": Warn},
			"off on this cluster: workload-api, admission-policies"},
		{"1.37 with everything", version.Info{GitVersion: "v1.37.2", Minor: "37"}, []*metav1.APIResourceList{dra, mapV1, workload},
			map[string]string{"kubernetes version": OK, "dra": OK, "workload-api": OK, "admission-policies": OK},
			"every optional API gpuplane uses is served"},
		{"1.33", version.Info{GitVersion: "v1.33.5-gke.100", Minor: "33+"}, nil,
			map[string]string{"kubernetes version": Fail, "dra": Warn},
			"this Kubernetes version is not supported"},
		{"1.38", version.Info{GitVersion: "v1.38.0", Minor: "38"}, []*metav1.APIResourceList{dra, mapV1},
			map[string]string{"kubernetes version": Warn}, "off on this cluster: workload-api"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			disc := c.Discovery().(*fakediscovery.FakeDiscovery)
			disc.FakedServerVersion = &tc.version
			disc.Resources = tc.served
			r, err := (&doctor{client: c}).cluster()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Check{}
			for _, ch := range r.Checks {
				got[ch.Name] = ch
			}
			for name, want := range tc.checks {
				if got[name].Result != want {
					t.Errorf("check %s: %+v, want %s", name, got[name], want)
				}
				if want == Warn && name != "kubernetes version" && (!strings.Contains(got[name].Detail, "off") || got[name].Fix == "") {
					t.Errorf("check %s says not what is off or how to turn it on: %+v", name, got[name])
				}
			}
			if r.Summary != tc.summary {
				t.Errorf("summary %q, want %q", r.Summary, tc.summary)
			}
		})
	}
}
