package adapter

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// What a pod keeps: its metadata; of its spec the scheduler name, node,
// node selector, affinity, tolerations, priority and priority class,
// scheduling gates, overhead and pod-level resources, and of each
// container its name, resources and restart policy (a restartable init
// container counts as a sidecar); of its status the phase and conditions.
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

func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	slimMeta(out)
	s := &p.Spec
	out.Spec = corev1.PodSpec{
		SchedulerName:     s.SchedulerName,
		NodeName:          s.NodeName,
		NodeSelector:      s.NodeSelector,
		Affinity:          s.Affinity,
		Tolerations:       s.Tolerations,
		Priority:          s.Priority,
		PriorityClassName: s.PriorityClassName,
		SchedulingGates:   s.SchedulingGates,
		Overhead:          s.Overhead,
		Resources:         s.Resources,
		InitContainers:    slimContainers(s.InitContainers),
		Containers:        slimContainers(s.Containers),
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions}
	return out
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		out[i] = corev1.Container{Name: cs[i].Name, Resources: cs[i].Resources, RestartPolicy: cs[i].RestartPolicy}
	}
	return out
}

func slimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: n.ObjectMeta, Spec: n.Spec}
	slimMeta(out)
	out.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable}
	return out
}
