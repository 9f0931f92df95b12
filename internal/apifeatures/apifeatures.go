package apifeatures

import (
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Feature is an optional Kubernetes API gpuplane uses.
type Feature struct {
	// Name is how logs, metrics and `gpuplane doctor cluster` name it.
	Name string
	// Resources are where the API is read, preferred first: the first
	// one the cluster serves is used.
	Resources []schema.GroupVersionResource
	// ServedBy says which Kubernetes releases serve it, and how.
	ServedBy string
	// Off says what gpuplane does without it.
	Off string
}

// The optional APIs.
var (
	// DRA is dynamic resource allocation's API: gpuplane-scheduler
	// allocates ResourceClaims from the agents' ResourceSlices, and the
	// agent's DRA driver publishes them and prepares the claims.
	DRA = Feature{
		Name:      "dra",
		Resources: []schema.GroupVersionResource{{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}},
		ServedBy:  "resource.k8s.io/v1: Kubernetes 1.34 and later",
		Off: "GPUs are served through the device plugin only: the agents publish no ResourceSlices and " +
			"gpuplane-scheduler allocates no ResourceClaims",
	}
	// WorkloadAPI is Kubernetes' Workload API PodGroup, which a pod names
	// in spec.schedulingGroup; gpuplane-scheduler reads its gang and
	// topology from it.
	WorkloadAPI = Feature{
		Name: "workload-api",
		Resources: []schema.GroupVersionResource{
			{Group: "scheduling.k8s.io", Version: "v1alpha3", Resource: "podgroups"},
			{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"},
		},
		ServedBy: "scheduling.k8s.io/v1alpha2 (Kubernetes 1.36) or v1alpha3 (1.37), alpha: the GenericWorkload " +
			"feature gate and --runtime-config=scheduling.k8s.io/<version>=true on the API server",
		Off: "pods' spec.schedulingGroup is not read; gangs come from gpuplane PodGroups, Volcano's and the pods' workloads",
	}
	// AdmissionPolicies is MutatingAdmissionPolicy, which the chart's
	// admission policies (admission.hideGPUs, gpuFractionDevice, kaiPods,
	// hamiPods) are.
	AdmissionPolicies = Feature{
		Name: "admission-policies",
		Resources: []schema.GroupVersionResource{
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
			{Group: "admissionregistration.k8s.io", Version: "v1beta1", Resource: "mutatingadmissionpolicies"},
		},
		ServedBy: "admissionregistration.k8s.io/v1: Kubernetes 1.36 and later; v1beta1 on 1.34-1.35 with the " +
			"MutatingAdmissionPolicy feature gate and --runtime-config=admissionregistration.k8s.io/v1beta1=true",
		Off: "the chart installs no MutatingAdmissionPolicy: containers that ask for no GPU are not hidden from the GPUs, " +
			"pods that ask for part of a GPU only by annotation are not placed (FractionWithoutGPU), and pods written for " +
			"KAI Scheduler or HAMi are not handed to gpuplane-scheduler",
	}
)

// All lists the optional APIs in the order reports show them.
func All() []Feature { return []Feature{DRA, WorkloadAPI, AdmissionPolicies} }

// Served is what one cluster serves of the optional APIs.
type Served struct {
	at map[string]schema.GroupVersionResource
}

// Has reports whether the cluster serves f.
func (s Served) Has(f Feature) bool {
	_, ok := s.at[f.Name]
	return ok
}

// Resource is where the cluster serves f: the first of f.Resources it
// serves.
func (s Served) Resource(f Feature) (schema.GroupVersionResource, bool) {
	r, ok := s.at[f.Name]
	return r, ok
}

// Missing lists the features of fs the cluster does not serve, in order.
func (s Served) Missing(fs ...Feature) []Feature {
	var out []Feature
	for _, f := range fs {
		if !s.Has(f) {
			out = append(out, f)
		}
	}
	return out
}

// Reason is one line saying why f is off and what gpuplane does instead.
func (f Feature) Reason() string {
	return fmt.Sprintf("the API server does not serve %s (%s): %s", f.Name, f.ServedBy, f.Off)
}

// Discover asks the API server's discovery which of fs it serves, one
// request per group version, all sent at once. An API server that cannot
// answer for a group version (it is down, or an aggregated API fails) is an
// error: a feature is only reported missing when the server says it does
// not serve it. A group version after the one a feature was found at is
// asked too but its answer, or failure, is not read.
func Discover(d discovery.DiscoveryInterface, fs ...Feature) (Served, error) {
	type answer struct {
		list *metav1.APIResourceList
		err  error
	}
	var gvs []schema.GroupVersion
	for _, f := range fs {
		for _, r := range f.Resources {
			if gv := r.GroupVersion(); !slices.Contains(gvs, gv) {
				gvs = append(gvs, gv)
			}
		}
	}
	answers := make([]answer, len(gvs))
	var wg sync.WaitGroup
	for i, gv := range gvs {
		wg.Go(func() {
			list, err := d.ServerResourcesForGroupVersion(gv.String())
			if apierrors.IsNotFound(err) {
				list, err = nil, nil
			}
			answers[i] = answer{list, err}
		})
	}
	wg.Wait()
	s := Served{at: map[string]schema.GroupVersionResource{}}
	for _, f := range fs {
		for _, r := range f.Resources {
			a := answers[slices.Index(gvs, r.GroupVersion())]
			if a.err != nil {
				return Served{}, fmt.Errorf("looking up %s in the API server's discovery: %w", r.GroupVersion(), a.err)
			}
			if a.list != nil && slices.ContainsFunc(a.list.APIResources, func(x metav1.APIResource) bool { return x.Name == r.Resource }) {
				s.at[f.Name] = r
				break
			}
		}
	}
	return s, nil
}

// ServedOnly is a Served that serves exactly the given features at their
// preferred resources: for tests and for callers that skip discovery.
func ServedOnly(fs ...Feature) Served {
	s := Served{at: map[string]schema.GroupVersionResource{}}
	for _, f := range fs {
		if len(f.Resources) > 0 {
			s.at[f.Name] = f.Resources[0]
		}
	}
	return s
}
