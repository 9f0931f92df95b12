package apifeatures

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// cluster is a discovery that serves the given group versions, each with
// the named resources.
func cluster(served map[string][]string) *fake.FakeDiscovery {
	d := &fake.FakeDiscovery{Fake: &clienttesting.Fake{}}
	for gv, names := range served {
		list := &metav1.APIResourceList{GroupVersion: gv}
		for _, n := range names {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: n})
		}
		d.Resources = append(d.Resources, list)
	}
	return d
}

// The API sets below are what each supported minor's kube-apiserver
// serves with its defaults, reduced to the groups the features live in.
func TestDiscover(t *testing.T) {
	admission := []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}
	dra := []string{"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"}
	cases := []struct {
		name    string
		served  map[string][]string
		want    []string // feature name=group/version, in All() order
		missing []string
	}{
		{"1.34 defaults", map[string][]string{
			"admissionregistration.k8s.io/v1": admission, "resource.k8s.io/v1": dra, "scheduling.k8s.io/v1": {"priorityclasses"},
		}, []string{"dra=resource.k8s.io/v1"}, []string{"workload-api", "admission-policies"}},
		{"1.34 with MutatingAdmissionPolicy beta on", map[string][]string{
			"admissionregistration.k8s.io/v1":      admission,
			"admissionregistration.k8s.io/v1beta1": {"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"},
			"resource.k8s.io/v1":                   dra,
		}, []string{"dra=resource.k8s.io/v1", "admission-policies=admissionregistration.k8s.io/v1beta1"}, []string{"workload-api"}},
		{"1.36 with the Workload API", map[string][]string{
			"admissionregistration.k8s.io/v1": append(admission, "mutatingadmissionpolicies"),
			"resource.k8s.io/v1":              dra,
			"scheduling.k8s.io/v1alpha2":      {"podgroups", "workloads"},
		}, []string{"dra=resource.k8s.io/v1", "workload-api=scheduling.k8s.io/v1alpha2", "admission-policies=admissionregistration.k8s.io/v1"}, nil},
		{"1.37 with the Workload API", map[string][]string{
			"admissionregistration.k8s.io/v1": append(admission, "mutatingadmissionpolicies"),
			"resource.k8s.io/v1":              dra,
			"scheduling.k8s.io/v1alpha3":      {"podgroups", "workloads"},
		}, []string{"dra=resource.k8s.io/v1", "workload-api=scheduling.k8s.io/v1alpha3", "admission-policies=admissionregistration.k8s.io/v1"}, nil},
		{"a group version served without the resource", map[string][]string{
			"resource.k8s.io/v1": {"deviceclasses"},
		}, nil, []string{"dra", "workload-api", "admission-policies"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Discover(cluster(tc.served), All()...)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range All() {
				if r, ok := s.Resource(f); ok {
					got = append(got, f.Name+"="+r.GroupVersion().String())
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("served %v, want %v", got, tc.want)
			}
			var missing []string
			for _, f := range s.Missing(All()...) {
				missing = append(missing, f.Name)
			}
			if strings.Join(missing, " ") != strings.Join(tc.missing, " ") {
				t.Errorf("missing %v, want %v", missing, tc.missing)
			}
		})
	}
}

// A discovery failure other than "not served" is an error, never a
// feature reported missing.
func TestDiscoverFailureIsAnError(t *testing.T) {
	d := cluster(nil)
	d.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := Discover(d, DRA); err == nil || !strings.Contains(err.Error(), "resource.k8s.io/v1") {
		t.Fatalf("Discover on a failing API server: %v, want an error naming resource.k8s.io/v1", err)
	}
}

func TestReasonSaysWhatIsOff(t *testing.T) {
	for _, f := range All() {
		r := f.Reason()
		if !strings.Contains(r, f.Name) || !strings.Contains(r, f.ServedBy) || !strings.Contains(r, f.Off) {
			t.Errorf("%s: reason %q names neither the feature, where it is served or what is off", f.Name, r)
		}
	}
}
