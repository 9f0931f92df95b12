package adapter

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
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
// priority and priority class, and while it waits its node selector,
// affinity, tolerations and scheduling gates; of its status the phase and,
// while it waits, the PodScheduled condition. Its requests are summed as
// the kubelet counts them and kept as the pod's overhead, with no
// containers (read them with resourcehelper.PodRequests, never from
// Spec.Containers); only a pod whose containers fail a check that names
// one (checkContainers) keeps each container's name, resources and restart
// policy. Labels, annotations, node selectors, resource lists, owner
// references and common strings, alike across the pods of a workload, are
// shared between pods (internTable, stringTable, ownerTable).
// A node keeps its metadata, its spec and of its status capacity and
// allocatable. The scheduler never writes back a whole cached object (it
// binds, evicts, and patches status), so nothing is lost on the server.
func forCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case metav1.Object:
		slimMeta(o)
	}
	return obj, nil
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
// group and queue annotations (v1alpha1.GroupKeys, QueueKeys). A new one
// read must be added.
var podAnnotations = []string{gpupod.GPUsAnnotation, gpupod.HeldAnnotation, gpupod.FractionAnnotation, gpupod.MemoryAnnotation, gpupod.KAIFraction, gpupod.KAIMemory,
	v1alpha1.VolcanoGroupAnnotation, v1alpha1.VolcanoQueueAnnotation}

func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields = nil
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
	out.Namespace, out.GenerateName = strs.intern(p.Namespace), strs.intern(p.GenerateName)
	out.OwnerReferences = owners.intern(p.OwnerReferences)
	s := &p.Spec
	out.Spec = corev1.PodSpec{
		SchedulerName:     strs.intern(s.SchedulerName),
		NodeName:          strs.intern(s.NodeName),
		Priority:          s.Priority,
		PriorityClassName: strs.intern(s.PriorityClassName),
		// The Workload API's group reference, which the grouper reads.
		SchedulingGroup: s.SchedulingGroup,
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase}
	if s.NodeName == "" {
		// Where a pod may go is read only while it waits: NodeName is
		// never unset, so a bound pod needs none of this.
		out.Spec.NodeSelector = strMaps.intern(s.NodeSelector)
		out.Spec.Affinity = s.Affinity
		out.Spec.Tolerations = s.Tolerations
		out.Spec.SchedulingGates = s.SchedulingGates
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				out.Status.Conditions = []corev1.PodCondition{c}
				break
			}
		}
	}
	if checkContainers(p) == nil && collapsible(p) {
		// The pod's requests as the kubelet counts them (init containers,
		// sidecars, overhead and pod-level resources), kept as the
		// overhead of a pod with no containers: all the scheduler reads
		// of them once the checks that name a container have passed, and
		// resourcehelper.PodRequests of the cached pod gives the same.
		out.Spec.Overhead = lists.intern(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
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
	}
	return out
}

// lists and strMaps are the cache's tables of shared resource lists and
// string maps (labels, node selectors).
var (
	lists   = newInternTable[corev1.ResourceName](func(q resource.Quantity) string { return q.String() })
	strMaps = newInternTable[string](func(s string) string { return s })
)

// maxInterned bounds an internTable: past it the table starts over.
const maxInterned = 4096

// strs shares the strings many cached objects repeat (namespaces, node,
// scheduler and priority class names); owners the owner references of the
// pods of one workload.
var (
	strs   = &stringTable{m: map[string]string{}}
	owners = &ownerTable{m: map[ownerKey][]metav1.OwnerReference{}}
)

// maxStrings bounds stringTable: past it the table starts over. It holds a
// large cluster's node names.
const maxStrings = 1 << 16

// stringTable keeps one copy of each distinct string; like internTable,
// nothing depends on it.
type stringTable struct {
	mu sync.Mutex
	m  map[string]string
}

func (t *stringTable) intern(s string) string {
	if s == "" || len(s) > 253 {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.m[s]; ok {
		return shared
	}
	if len(t.m) >= maxStrings {
		clear(t.m)
	}
	t.m[s] = s
	return s
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

// ownerTable shares the owner reference of pods with one owner (the pods
// of a ReplicaSet, a Job, a StatefulSet): the same slice for all of them.
type ownerTable struct {
	mu sync.Mutex
	m  map[ownerKey][]metav1.OwnerReference
}

func (t *ownerTable) intern(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) != 1 {
		return refs
	}
	r := &refs[0]
	k := ownerKey{r.APIVersion, r.Kind, r.Name, r.UID, tristate(r.Controller), tristate(r.BlockOwnerDeletion)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.m[k]; ok {
		return shared
	}
	if len(t.m) >= maxInterned {
		clear(t.m)
	}
	t.m[k] = refs
	return refs
}

// internTable shares one copy of each distinct map among the cached pods.
// The pods of a workload carry the same labels and ask for the same
// resources, and a decoded map costs a few hundred bytes (a resource
// list's Quantities more), the largest part of a slimmed pod. Cached
// objects are never written, so sharing is safe; the table is bounded,
// and nothing depends on it (a map the table forgot stays with the pods
// that hold it).
type internTable[K ~string, V any] struct {
	mu  sync.Mutex
	m   map[string]map[K]V
	str func(V) string
	b   strings.Builder
}

func newInternTable[K ~string, V any](str func(V) string) *internTable[K, V] {
	return &internTable[K, V]{m: map[string]map[K]V{}, str: str}
}

func (t *internTable[K, V]) intern(m map[K]V) map[K]V {
	if len(m) == 0 || len(m) > 64 {
		return m
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.b.Reset()
	for _, k := range keys {
		// Lengths first, so that no key or value can forge a separator.
		v := t.str(m[k])
		t.b.WriteString(strconv.Itoa(len(k)))
		t.b.WriteByte(':')
		t.b.WriteString(string(k))
		t.b.WriteString(strconv.Itoa(len(v)))
		t.b.WriteByte(':')
		t.b.WriteString(v)
	}
	key := t.b.String()
	if shared, ok := t.m[key]; ok {
		return shared
	}
	if len(t.m) >= maxInterned {
		clear(t.m)
	}
	t.m[key] = m
	return m
}

func slimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: n.ObjectMeta, Spec: n.Spec}
	slimMeta(out)
	out.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable}
	return out
}
