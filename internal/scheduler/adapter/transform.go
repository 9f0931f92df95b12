package adapter

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// node selector, affinity, tolerations, priority and priority class,
// scheduling gates, overhead and pod-level resources, and of each
// container its name, resources and restart policy (a restartable init
// container counts as a sidecar); of its status the phase and the
// PodScheduled condition. Labels, node selectors and resource lists, alike
// across the pods of a workload, are shared between pods (listTable).
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
	out.Labels = strMaps.intern(p.Labels)
	s := &p.Spec
	out.Spec = corev1.PodSpec{
		SchedulerName:     s.SchedulerName,
		NodeName:          s.NodeName,
		NodeSelector:      strMaps.intern(s.NodeSelector),
		Affinity:          s.Affinity,
		Tolerations:       s.Tolerations,
		Priority:          s.Priority,
		PriorityClassName: s.PriorityClassName,
		SchedulingGates:   s.SchedulingGates,
		// The Workload API's group reference, which the grouper reads.
		SchedulingGroup: s.SchedulingGroup,
		Overhead:        lists.intern(s.Overhead),
		Resources:       s.Resources,
		InitContainers:  slimContainers(s.InitContainers),
		Containers:      slimContainers(s.Containers),
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out.Status.Conditions = []corev1.PodCondition{c}
			break
		}
	}
	return out
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
