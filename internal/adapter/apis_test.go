package adapter

import (
	"testing"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The scheduler turns off what the cluster does not serve and says so in
// gpuplane_scheduler_api_served; the Workload API's PodGroup is read at
// the version served.
func TestDiscoverAPIs(t *testing.T) {
	cases := []struct {
		name     string
		served   map[string][]string
		want     map[string]float64
		workload string
	}{
		{"Kubernetes 1.34 defaults", map[string][]string{
			"resource.k8s.io/v1":              {"resourceslices", "deviceclasses", "resourceclaims"},
			"admissionregistration.k8s.io/v1": {"validatingadmissionpolicies"},
		}, map[string]float64{"dra": 1, "workload-api": 0, "admission-policies": 0}, ""},
		{"Kubernetes 1.37 with the Workload API", map[string][]string{
			"resource.k8s.io/v1":              {"resourceslices", "deviceclasses", "resourceclaims"},
			"admissionregistration.k8s.io/v1": {"mutatingadmissionpolicies"},
			"scheduling.k8s.io/v1alpha3":      {"podgroups"},
		}, map[string]float64{"dra": 1, "workload-api": 1, "admission-policies": 1}, "scheduling.k8s.io/v1alpha3"},
		{"no DRA", map[string][]string{}, map[string]float64{"dra": 0, "workload-api": 0, "admission-policies": 0}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &fake.FakeDiscovery{Fake: &clienttesting.Fake{}}
			for gv, names := range tc.served {
				list := &metav1.APIResourceList{GroupVersion: gv}
				for _, n := range names {
					list.APIResources = append(list.APIResources, metav1.APIResource{Name: n})
				}
				d.Resources = append(d.Resources, list)
			}
			m := newMetrics()
			served, err := discoverAPIs(d, m, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			for feature, want := range tc.want {
				var got dto.Metric
				if err := m.apiServed.WithLabelValues(feature).Write(&got); err != nil {
					t.Fatal(err)
				}
				if got.GetGauge().GetValue() != want {
					t.Errorf("gpuplane_scheduler_api_served{feature=%q} = %v, want %v", feature, got.GetGauge().GetValue(), want)
				}
			}
			if got := workloadAPIVersion(served); got != tc.workload {
				t.Errorf("Workload API PodGroup read at %q, want %q", got, tc.workload)
			}
		})
	}
}
