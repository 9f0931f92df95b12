package dra

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Extended resources served through DRA (kube-scheduler's
// DRAExtendedResource contract, k8s.io/kubernetes
// pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go).
// A pending pod asking for nvidia.com/gpu, which a DeviceClass maps with
// spec.extendedResourceName, may go to a node that advertises the resource
// (the device plugin serves it, as for any pod) or to one that does not,
// where a ResourceClaim the scheduler makes for the pod serves it. The
// core sees one request: that many whole GPUs of a device set whose GPUs
// are, on a node advertising the resource, all the device plugin's, and
// on any other node those the DeviceClass's selectors pass. The binder
// then makes the claim only when the chosen node does not advertise the
// resource.

// erClaimMemPrefix names a pod's extended-resource claim in the State
// before it exists in the API server (the in-flight allocation is kept
// under namespace/<prefix><pod UID>).
const erClaimMemPrefix = "extended-resources.gpuplane.io-"

// erClaimMemKey is the State's key of a pod's extended-resource claim not
// made yet.
func erClaimMemKey(namespace string, uid types.UID) string {
	return namespace + "/" + erClaimMemPrefix + string(uid)
}

// isERClaim reports whether a claim is an extended-resource claim and,
// if so, the pod that controls it.
func isERClaim(cl *resourceapi.ResourceClaim) (types.UID, bool) {
	if cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return "", false
	}
	for _, o := range cl.OwnerReferences {
		if o.Kind == "Pod" && o.Controller != nil && *o.Controller {
			return o.UID, true
		}
	}
	return "", false
}

// classFor is the DeviceClass that maps an extended resource, as
// kube-scheduler picks it among several: the newest, then the lowest
// name.
func (s *State) classFor(res corev1.ResourceName) *resourceapi.DeviceClass {
	var out *resourceapi.DeviceClass
	for _, dc := range s.classes {
		if dc.Spec.ExtendedResourceName == nil || *dc.Spec.ExtendedResourceName != string(res) {
			continue
		}
		if out == nil {
			out = dc
			continue
		}
		switch t, o := dc.CreationTimestamp.UnixNano(), out.CreationTimestamp.UnixNano(); {
		case t > o, t == o && dc.Name < out.Name:
			out = dc
		}
	}
	return out
}

// Serves reports whether a DeviceClass may serve extended resource res
// through a claim made for it: res names a class itself
// (deviceclass.resource.kubernetes.io/<class>, which waits when the class
// is missing) or a class maps it (spec.extendedResourceName). When neither
// holds, a pod that asks res and names no claim has none to resolve
// (resolveExtended).
func (s *State) Serves(res corev1.ResourceName) bool {
	return strings.HasPrefix(string(res), resourceapi.ResourceDeviceClassPrefix) || s.classFor(res) != nil
}

// advertises reports whether a node's allocatable lists an extended
// resource: its device plugin serves it.
func advertises(n *corev1.Node, res corev1.ResourceName) bool {
	q, ok := n.Status.Allocatable[res]
	return ok && !q.IsZero()
}

// ClaimableResource is the one extended resource of a pending pod that a
// DeviceClass may serve through a claim made for the pod: nvidia.com/gpu
// asked as whole GPUs, one nvidia.com/mig-<profile>, or the resource
// deviceclass.resource.kubernetes.io/<class> every DeviceClass implies;
// "" for none. A pod asking for a class's implied resource besides GPUs
// of another kind, or for two of them, is refused: gpuplane-scheduler
// places a pod's claims as whole GPUs or one MIG device of one set.
func ClaimableResource(p *corev1.Pod, r *model.Request) (corev1.ResourceName, *Wait) {
	var implied corev1.ResourceName
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for name, q := range cs[i].Resources.Requests {
				if !strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix) || q.IsZero() {
					continue
				}
				if implied != "" && implied != name {
					return "", wait("MixedGPURequest", "the pod asks for %s and %s: gpuplane-scheduler serves one DeviceClass's resource per pod; ask for one of them, or name both classes in a ResourceClaim", implied, name)
				}
				implied = name
			}
		}
	}
	switch {
	case implied != "" && (r.UsesGPU() || len(p.Spec.ResourceClaims) > 0):
		return "", wait("MixedGPURequest", "the pod asks for %s besides other GPUs: ask for GPUs one way, through %s alone, the device plugin's resources or spec.resourceClaims", implied, implied)
	case implied != "":
		return implied, nil
	case r.GPUMilli > 0 || r.GPUMemoryMiB > 0 || r.ShareResource != "" && r.GPUs == 0:
		return "", nil
	case r.MIGSlices > 0 && r.MIGProfile != "":
		return corev1.ResourceName(gpunode.MIGResourcePrefix + r.MIGProfile), nil
	case r.GPUs > 0:
		return gpunode.ResourceGPU, nil
	}
	return "", nil
}

// resolveExtended returns the claims of a pending pod that asks for an
// extended resource a DeviceClass maps (ClaimableResource), nil when it
// asks for none or is served by the device plugin only (a class whose
// selectors fail or select other devices than the resource names, a
// share, containers the cache does not keep). A resource a class implies
// (deviceclass.resource.kubernetes.io/<class>) no device plugin serves:
// the pod waits with the reason when the class is missing or its claim
// cannot be placed. A claim made for the pod earlier (by a scheduler that
// stopped before binding it) is the pod's claim: allocated, it pins the
// pod to its node; not allocated, it is allocated as made, on nodes
// without the resource.
func (m *Memo) resolveExtended(s *State, nodes *Nodes, pp Pending) (*Claims, *Wait) {
	p := pp.Pod
	r := pp.Req
	res := pp.Extended
	if res == "" || !AsksMappable(p) { // or the cache keeps no containers that ask it
		return nil, nil
	}
	className, implied := strings.CutPrefix(string(res), resourceapi.ResourceDeviceClassPrefix)
	var class *resourceapi.DeviceClass
	if implied {
		if class = s.classes[className]; class == nil {
			return nil, wait("DeviceClassNotFound", "the pod asks for %s, but DeviceClass %q does not exist: create it or ask for an existing class's resource", res, className)
		}
	} else if class = s.classFor(res); class == nil {
		return nil, nil
	}
	_, made := s.erClaimByPod[p.UID]
	m.resetSets(s, nodes)
	if e, ok := m.erSets[pp.Key]; ok && e.pod == p && !made {
		// The same pod object, slices, classes and nodes: the same claim
		// and set; only what the writer fills in is new.
		if e.set == nil {
			return nil, nil
		}
		return &Claims{Alloc: []*resourceapi.ResourceClaim{e.claim}, Set: e.set,
			ERClaim: &ERClaim{Resource: res, Mappings: e.mappings}}, nil
	}
	reqs, mappings := extendedRequests(p, res, class.Name)
	if len(reqs) == 0 {
		if implied {
			return nil, wait("RequestOutOfRange", "the pod asks for %s, but no container asks for a whole number of devices from 1 to %d", res, MaxGPUs)
		}
		return nil, nil
	}
	erClaim := &ERClaim{Resource: res, Mappings: mappings}
	pc := &Claims{ERClaim: erClaim}
	if key, ok := s.erClaimByPod[p.UID]; ok {
		cl := s.claims[key]
		if cl.DeletionTimestamp != nil {
			return nil, wait("ResourceClaimDeleted", "the claim for its extended resources, ResourceClaim %s, is being deleted", key)
		}
		erClaim.Created = cl
		alloc := cl.Status.Allocation
		if f := s.inflight[key]; f != nil && f.alloc != nil {
			alloc = f.alloc
		}
		if alloc != nil {
			node := AllocationNode(alloc)
			if node == "" {
				return nil, wait("UnsupportedClaim", "ResourceClaim %s (its extended resources) is allocated without a single node", key)
			}
			pc.Node, pc.Shared = node, []*resourceapi.ResourceClaim{cl}
			return pc, nil
		}
		pc.Alloc = []*resourceapi.ResourceClaim{cl}
	} else {
		pc.Alloc = []*resourceapi.ResourceClaim{erClaimFor(p, reqs)}
	}
	base := m.deviceSet(s, nodes, []ClaimSpec{{Requests: pc.Alloc[0].Spec.Devices.Requests}})
	var serves bool
	switch {
	case base.Err != "":
	case implied:
		serves = true
	case r.MIGSlices > 0:
		// One MIG device of the profile: the class's smallest device
		// that passes is of the pod's size.
		serves = base.MIGSlices == r.MIGSlices && base.Count == 1
	default:
		serves = base.MIGSlices == 0 && !base.Share && base.Count == r.GPUs
	}
	switch {
	case base.Err != "" && (erClaim.Created != nil || implied):
		what := "its extended resources"
		if implied {
			what = string(res)
		}
		return nil, wait(base.ErrCode, "%s (DeviceClass %s, for %s): %s", cmp.Or(claimKeyOf(erClaim.Created), "its claim"), class.Name, what, base.Err)
	case !serves:
		// A class whose selectors fail, that selects devices of another
		// kind than the resource names, or requests that sum to more
		// than the pod's GPUs (init containers asking for more than the
		// others): the device plugin alone serves the pod, as before the
		// mapping.
		m.Log.V(2).Info("extended resource served by the device plugin only", "pod", pp.Key, "resource", res, "deviceClass", class.Name,
			"reason", base.Err, "claimDevices", base.Count, "migSlices", base.MIGSlices, "gpus", r.GPUs)
		if erClaim.Created == nil {
			m.memoER(pp.Key, erMemo{pod: p})
		}
		return nil, nil
	}
	pc.Set = base
	if erClaim.Created == nil {
		pc.Set = m.erSet(nodes, base, res)
		m.memoER(pp.Key, erMemo{pod: p, claim: pc.Alloc[0], mappings: mappings, set: pc.Set})
	}
	return pc, nil
}

// claimKeyOf is claimKey of a claim that may not exist ("").
func claimKeyOf(cl *resourceapi.ResourceClaim) string {
	if cl == nil {
		return ""
	}
	return "ResourceClaim " + claimKey(cl)
}

// erMemo is a pending pod's extended-resource claim not made yet, its
// request mappings and its device set (nil: the device plugin alone
// serves the pod), while the pod object, slices, classes and nodes stay
// the same. Nothing in it is written after it is made.
type erMemo struct {
	pod      *corev1.Pod
	claim    *resourceapi.ResourceClaim
	mappings []corev1.ContainerExtendedResourceRequest
	set      *DeviceSet
}

// maxERSets bounds the pods whose extended-resource claims are kept.
const maxERSets = 1 << 17

func (m *Memo) memoER(pod string, e erMemo) {
	if len(m.erSets) >= maxERSets {
		clear(m.erSets)
	}
	m.erSets[pod] = e
}

// erSetPrefix names the device sets made for an extended resource,
// followed by the resource's name, so that why a pod waits names the
// resource it asked for, not a claim it never wrote.
const erSetPrefix = "extended-"

// erSet is a device set made for an extended resource: on every node
// advertising the resource all the GPUs its device plugin offers (the
// core then picks among them by the request's kind, whole GPUs or a MIG
// device), on the others the GPUs of the DeviceClass's set.
func (m *Memo) erSet(nodes *Nodes, base *DeviceSet, res corev1.ResourceName) *DeviceSet {
	key := "\x00ext/" + string(res) + "/" + base.Name
	if set := m.sets[key]; set != nil {
		return set
	}
	set := *base
	set.Masks = slices.Clone(base.Masks)
	for i, n := range m.nodeViews(nodes) {
		if !advertises(n.Node, res) {
			continue
		}
		var mask uint64
		for g := range n.GPUs {
			if g < 64 && !n.GPUs[g].ClaimOnly {
				mask |= 1 << uint(g)
			}
		}
		set.Masks[i] = mask
	}
	m.nextSet++
	set.Name = erSetPrefix + string(res) + "#" + strconv.Itoa(m.nextSet)
	m.sets[key] = &set
	return &set
}

// ExtendedResource is the extended resource a device set was made for
// (erSet), false for a set of claims.
func ExtendedResource(setName string) (string, bool) {
	res, ok := strings.CutPrefix(setName, erSetPrefix)
	if !ok {
		return "", false
	}
	res, _, _ = strings.Cut(res, "#")
	return res, true
}

// erClaimFor is the claim kube-scheduler would make for a pod's extended
// resources, kept in the State until the binder makes it: generateName
// <pod>-extended-resources-, controlled by the pod, annotated as an
// extended-resource claim.
func erClaimFor(p *corev1.Pod, reqs []resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    p.Namespace,
			Name:         erClaimMemPrefix + string(p.UID),
			UID:          types.UID(erClaimMemPrefix + string(p.UID)),
			GenerateName: p.Name + "-extended-resources-",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true),
			}},
			Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

// extendedRequests is the claim's requests and the pod's request mappings
// for one extended resource, as kube-scheduler's createRequestsAndMappings
// makes them: one request per container asking for it, named
// container-<i>-request-<j> (i its index among init containers then
// containers, j the resource's index among the container's sorted request
// names), for the DeviceClass and the count; an init container that is
// not a sidecar first reuses the requests of the long-lived containers
// after it and asks only for the rest, and only the largest such request
// is kept, the others' mappings naming it.
func extendedRequests(p *corev1.Pod, res corev1.ResourceName, class string) ([]resourceapi.DeviceRequest, []corev1.ContainerExtendedResourceRequest) {
	containers := slices.Concat(p.Spec.InitContainers, p.Spec.Containers)
	nInit := len(p.Spec.InitContainers)
	var long, short []int
	for i, c := range containers {
		if i < nInit && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			short = append(short, i)
		} else {
			long = append(long, i)
		}
	}
	var longMaps, shortMaps []corev1.ContainerExtendedResourceRequest
	longReqs := make([]*resourceapi.DeviceRequest, len(containers))
	for _, i := range long {
		r, m := containerRequest(i, &containers[i], res, class, nil)
		longReqs[i] = r
		longMaps = append(longMaps, m...)
	}
	var maxShort *resourceapi.DeviceRequest
	shortNames := sets.New[string]()
	for _, i := range short {
		r, m := containerRequest(i, &containers[i], res, class, longReqs[i:])
		if r != nil {
			shortNames.Insert(r.Name)
			if maxShort == nil || maxShort.Exactly.Count < r.Exactly.Count {
				maxShort = r
			}
		}
		shortMaps = append(shortMaps, m...)
	}
	if maxShort != nil && len(shortNames) > 1 {
		shortNames.Delete(maxShort.Name)
		for i := range shortMaps {
			if shortNames.Has(shortMaps[i].RequestName) {
				shortMaps[i].RequestName = maxShort.Name
			}
		}
	}
	var reqs []resourceapi.DeviceRequest
	if maxShort != nil {
		reqs = append(reqs, *maxShort)
	}
	for _, r := range longReqs {
		if r != nil {
			reqs = append(reqs, *r)
		}
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].Name < reqs[j].Name })
	return reqs, append(longMaps, shortMaps...)
}

// containerRequest is one container's request for an extended resource
// and its mappings; reusable are requests it takes first.
func containerRequest(i int, c *corev1.Container, res corev1.ResourceName, class string, reusable []*resourceapi.DeviceRequest) (*resourceapi.DeviceRequest, []corev1.ContainerExtendedResourceRequest) {
	q, ok := c.Resources.Requests[res]
	if !ok {
		return nil, nil
	}
	want, ok := q.AsInt64()
	if !ok || want <= 0 {
		return nil, nil
	}
	var maps []corev1.ContainerExtendedResourceRequest
	sum := int64(0)
	for _, r := range reusable {
		if r == nil {
			continue
		}
		sum += r.Exactly.Count
		maps = append(maps, corev1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: string(res), RequestName: r.Name})
		if sum >= want {
			return nil, maps
		}
	}
	keys := make([]string, 0, len(c.Resources.Requests))
	for k := range c.Resources.Requests {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	name := fmt.Sprintf("container-%d-request-%d", i, slices.Index(keys, string(res)))
	r := &resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: want - sum}}
	return r, append(maps, corev1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: string(res), RequestName: name})
}

// AsksMappable reports whether a pod asks for an extended resource a
// DeviceClass may serve (nvidia.com/gpu, nvidia.com/mig-<profile>, a
// class's implied resource): the cache then keeps its containers while it
// waits, to name the claim's requests after them.
func AsksMappable(p *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for name, q := range cs[i].Resources.Requests {
				if !q.IsZero() && mappable(name) {
					return true
				}
			}
		}
	}
	return false
}

// mappable reports whether a DeviceClass may serve a resource.
func mappable(name corev1.ResourceName) bool {
	return name == gpunode.ResourceGPU || strings.HasPrefix(string(name), gpunode.MIGResourcePrefix) ||
		strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix)
}
