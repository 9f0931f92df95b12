package adapter

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
)

// lastApplied is kubectl's copy of the whole object it applied: often the
// largest annotation, and never read here.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// forCache is the informers' transform: the cache keeps of each object only
// what the scheduler reads, so that its memory follows the cluster's size,
// not the size of the pod specs (images, commands, environments, volumes,
// container statuses) or of node status (images, addresses). Managed
// fields and kubectl's last-applied copy go from every object.
//
// What a pod keeps: its metadata, with of its annotations only those the
// scheduler reads (podAnnotations); of its spec the scheduler name, node,
// priority and priority class, the claims its volumes name (slimVolumes),
// and while it waits its node selector,
// affinity, tolerations and scheduling gates; of its status the phase and,
// while it waits, the PodScheduled condition. Its requests are summed as
// the kubelet counts them and kept as the pod's overhead, with no
// containers (read them with resourcehelper.PodRequests, never from
// Spec.Containers) but one that binds its host ports, if any; only a pod whose containers fail a check that names
// one (checkContainers) keeps each container's name, resources and restart
// policy. Labels, annotations, node selectors, resource lists, owner
// references and common strings, alike across the pods of a workload, are
// shared between pods (sharedTable).
// A node keeps its metadata, its spec and of its status capacity and
// allocatable. The scheduler never writes back a whole cached object (it
// binds, evicts, and patches status), so nothing is lost on the server.
//
// An informer may apply it twice to one object: with the streaming initial
// list (WatchListClient, on by default since client-go 1.35) the reflector
// transforms each object into its temporary store and the FIFO transforms
// the whole list again. A pod or node made here is marked (slimMark), and
// its transform is the object itself: the list is not copied twice, which
// doubled the cache's memory at start-up.
func forCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case *resourceapi.ResourceSlice:
		slimMeta(o)
		return dra.SlimSlice(o), nil
	case *resourceapi.ResourceClaim:
		slimMeta(o)
		return dra.SlimClaim(o), nil
	case metav1.Object:
		slimMeta(o)
	}
	return obj, nil
}

// slimMark is the managed fields of every pod and node forCache made: an
// empty slice of its own, which nothing decoded or deep-copied shares, so
// that slim reports a made object by its address. Anything reading managed
// fields sees none.
var slimMark = make([]metav1.ManagedFieldsEntry, 0, 1)

// slim reports whether forCache made o.
func slim(o metav1.Object) bool {
	mf := o.GetManagedFields()
	return cap(mf) > 0 && unsafe.SliceData(mf) == unsafe.SliceData(slimMark)
}

func slimMeta(o metav1.Object) {
	o.SetManagedFields(nil)
	if a := o.GetAnnotations(); a != nil {
		if _, ok := a[lastApplied]; ok {
			delete(a, lastApplied)
			o.SetAnnotations(a)
		}
	}
}

// podAnnotations are the pod annotations the scheduler reads: its own GPU
// choice, the node's record of what the pod holds, and the ways a pod asks
// for part of a GPU (gpupod.ReadFraction), and the other schedulers'
// group and queue annotations (v1alpha1.GroupKeys, QueueKeys), and the
// topology annotations of gpuplane, Kueue and KAI
// (v1alpha1.TopologyAnnotations), when the workload last checkpointed
// (v1alpha1.LastCheckpointAnnotation) and the opt-in to moves
// (v1alpha1.MovableAnnotation). A new one read must be added.
var podAnnotations = append([]string{gpupod.GPUsAnnotation, gpupod.HeldAnnotation, gpupod.FractionAnnotation, gpupod.MemoryAnnotation, gpupod.KAIFraction, gpupod.KAIMemory,
	v1alpha1.VolcanoGroupAnnotation, v1alpha1.VolcanoQueueAnnotation, v1alpha1.LastCheckpointAnnotation, v1alpha1.MovableAnnotation}, v1alpha1.TopologyAnnotations...)

func slimPod(p *corev1.Pod) *corev1.Pod {
	if slim(p) {
		return p
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields = slimMark
	out.Annotations = nil
	for _, k := range podAnnotations {
		if v, ok := p.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = make(map[string]string, 2)
			}
			out.Annotations[k] = v
		}
	}
	// Pods of a workload repeat these too (a GPU choice has few values).
	out.Annotations = strMaps.intern(out.Annotations)
	out.Labels = strMaps.intern(p.Labels)
	out.Namespace, out.GenerateName = shareString(p.Namespace), shareString(p.GenerateName)
	out.OwnerReferences = shareOwners(p.OwnerReferences)
	s := &p.Spec
	out.Spec = corev1.PodSpec{
		SchedulerName:     shareString(s.SchedulerName),
		NodeName:          shareString(s.NodeName),
		Priority:          s.Priority,
		PriorityClassName: shareString(s.PriorityClassName),
		// The Workload API's group reference, which the grouper reads.
		SchedulingGroup: s.SchedulingGroup,
		// The pod's ResourceClaims and the names of the claims made from
		// its templates, which the scheduler allocates (dra.Memo).
		ResourceClaims: s.ResourceClaims,
		// The claims its volumes name (volumes.go).
		Volumes: slimVolumes(s.Volumes),
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase, ResourceClaimStatuses: p.Status.ResourceClaimStatuses,
		ExtendedResourceClaimStatus: p.Status.ExtendedResourceClaimStatus}
	if s.NodeName == "" {
		// Where a pod may go is read only while it waits: NodeName is
		// never unset, so a bound pod needs none of this.
		out.Spec.NodeSelector = strMaps.intern(s.NodeSelector)
		out.Spec.Affinity = s.Affinity
		out.Spec.Tolerations = shareTolerations(s.Tolerations)
		out.Spec.SchedulingGates = s.SchedulingGates
		out.Spec.TopologySpreadConstraints = s.TopologySpreadConstraints
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				out.Status.Conditions = []corev1.PodCondition{c}
				break
			}
		}
	}
	if a := s.Affinity; s.NodeName != "" && a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		// A placed pod's inter-pod affinity still speaks to the pods
		// that come after it (its anti-affinity repels them).
		out.Spec.Affinity = &corev1.Affinity{PodAffinity: a.PodAffinity, PodAntiAffinity: a.PodAntiAffinity}
	}
	// A waiting pod asking for nvidia.com/gpu keeps its containers: a
	// claim for its extended resources names them (dra.Memo).
	if checkContainers(p) == nil && collapsible(p) && (s.NodeName != "" || !dra.AsksMappable(p)) {
		// The pod's requests as the kubelet counts them (init containers,
		// sidecars, overhead and pod-level resources), kept as the
		// overhead of a pod with no containers: all the scheduler reads
		// of them once the checks that name a container have passed, and
		// resourcehelper.PodRequests of the cached pod gives the same.
		out.Spec.Overhead = lists.intern(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
		// Its host ports, which the core counts, in a container of their
		// own (hostPortContainer).
		out.Spec.Containers = hostPortContainer(p)
		return out
	}
	out.Spec.Overhead = lists.intern(s.Overhead)
	out.Spec.Resources = s.Resources
	out.Spec.InitContainers = slimContainers(s.InitContainers)
	out.Spec.Containers = slimContainers(s.Containers)
	return out
}

// collapsible reports whether a pod's containers say nothing the
// scheduler reads beyond their requests: every extended resource a
// container limits it also requests (as the API server defaults it), and
// none claims a ResourceClaim.
func collapsible(p *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if len(cs[i].Resources.Claims) > 0 {
				return false
			}
			for name := range cs[i].Resources.Limits {
				if _, ok := cs[i].Resources.Requests[name]; isExtended(name) && !ok {
					return false
				}
			}
		}
	}
	return true
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		r := cs[i].Resources
		out[i] = corev1.Container{Name: cs[i].Name, RestartPolicy: cs[i].RestartPolicy, Resources: corev1.ResourceRequirements{
			Requests: lists.intern(r.Requests), Limits: lists.intern(r.Limits), Claims: r.Claims}}
		for _, cp := range cs[i].Ports {
			if cp.HostPort > 0 {
				out[i].Ports = append(out[i].Ports, cp)
			}
		}
	}
	return out
}

// lists and strMaps are the cache's tables of shared resource lists and
// string maps (labels, annotations, node selectors); strs shares the
// strings many cached objects repeat (namespaces, node, scheduler and
// priority class names), owners the owner reference of the pods of one
// workload.
var (
	lists   = newInternTable[corev1.ResourceName](func(q resource.Quantity) string { return q.String() })
	strMaps = newInternTable[string](func(s string) string { return s })
	strs    = newSharedTable[string, string](1 << 16) // a large cluster's node names
	owners  = newSharedTable[ownerKey, []metav1.OwnerReference](maxInterned)
	tols    = newSharedTable[string, []corev1.Toleration](maxInterned)
)

// maxInterned bounds a table of maps or owner references: past it the
// table starts over.
const maxInterned = 4096

// sharedTable keeps one value per key, for cached objects to share: alike
// values held once. Cached objects are never written, so sharing is safe;
// the table is bounded (past max entries it starts over), and nothing
// depends on it: a value the table forgot stays with the objects that hold
// it.
type sharedTable[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

func newSharedTable[K comparable, V any](maxEntries int) *sharedTable[K, V] {
	return &sharedTable[K, V]{m: map[K]V{}, max: maxEntries}
}

// share returns the value kept for k, keeping v for it when there is
// none. Callers hold t.mu.
func (t *sharedTable[K, V]) share(k K, v V) V {
	if shared, ok := t.m[k]; ok {
		return shared
	}
	if len(t.m) >= t.max {
		clear(t.m)
	}
	t.m[k] = v
	return v
}

// shareString shares one copy of each distinct string.
func shareString(s string) string {
	if s == "" || len(s) > 253 {
		return s
	}
	strs.mu.Lock()
	defer strs.mu.Unlock()
	return strs.share(s, s)
}

// ownerKey is a pod's single owner reference, as a map key.
type ownerKey struct {
	apiVersion, kind, name string
	uid                    types.UID
	controller, block      int8 // 0 unset, 1 false, 2 true
}

func tristate(b *bool) int8 {
	switch {
	case b == nil:
		return 0
	case *b:
		return 2
	}
	return 1
}

// shareOwners shares the owner reference of pods with one owner (the pods
// of a ReplicaSet, a Job, a StatefulSet): the same slice for all of them.
func shareOwners(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) != 1 {
		return refs
	}
	r := &refs[0]
	k := ownerKey{r.APIVersion, r.Kind, r.Name, r.UID, tristate(r.Controller), tristate(r.BlockOwnerDeletion)}
	owners.mu.Lock()
	defer owners.mu.Unlock()
	return owners.share(k, refs)
}

// shareTolerations shares the tolerations of waiting pods: the API server
// gives every pod the same two (not-ready and unreachable, for 300 s),
// and the pods of a workload add the same ones. A list is keyed by its
// entries' fields (writeKey).
func shareTolerations(ts []corev1.Toleration) []corev1.Toleration {
	if len(ts) == 0 || len(ts) > 16 {
		return ts
	}
	var b strings.Builder
	for i := range ts {
		t := &ts[i]
		secs := "-"
		if t.TolerationSeconds != nil {
			secs = strconv.FormatInt(*t.TolerationSeconds, 10)
		}
		writeKey(&b, t.Key, string(t.Operator), t.Value, string(t.Effect), secs)
	}
	tols.mu.Lock()
	defer tols.mu.Unlock()
	return tols.share(b.String(), ts)
}

// internTable shares one copy of each distinct map among the cached pods.
// The pods of a workload carry the same labels and ask for the same
// resources, and a decoded map costs a few hundred bytes (a resource
// list's Quantities more), the largest part of a slimmed pod. A map is
// keyed by its sorted entries.
type internTable[K ~string, V any] struct {
	t   *sharedTable[string, map[K]V]
	str func(V) string
	b   strings.Builder
}

func newInternTable[K ~string, V any](str func(V) string) *internTable[K, V] {
	return &internTable[K, V]{t: newSharedTable[string, map[K]V](maxInterned), str: str}
}

func (t *internTable[K, V]) intern(m map[K]V) map[K]V {
	if len(m) == 0 || len(m) > 64 {
		return m
	}
	t.t.mu.Lock()
	defer t.t.mu.Unlock()
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.b.Reset()
	for _, k := range keys {
		writeKey(&t.b, string(k), t.str(m[k]))
	}
	return t.t.share(t.b.String(), m)
}

// writeKey writes fields to a table key, each after its length, so that
// no field can forge a separator.
func writeKey(b *strings.Builder, fields ...string) {
	for _, f := range fields {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
}

func slimNode(n *corev1.Node) *corev1.Node {
	if slim(n) {
		return n
	}
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: n.ObjectMeta, Spec: n.Spec}
	slimMeta(out)
	out.ManagedFields = slimMark
	out.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable, Conditions: keptConditions(n.Status.Conditions)}
	return out
}
