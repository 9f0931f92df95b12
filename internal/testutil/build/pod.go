package build

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// ResourceGPU is the extended resource of whole NVIDIA GPUs.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// PodBuilder builds a Pod. Start with Pod.
type PodBuilder struct{ pod corev1.Pod }

// Pod returns a builder for a pod with one container, "main", that asks
// for nothing.
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{pod: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "main",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
		}}},
	}}
}

// GPUs makes the first container ask for n whole GPUs; extended resources
// are asked for through limits.
func (b *PodBuilder) GPUs(n int) *PodBuilder {
	return b.Limit(ResourceGPU, strconv.Itoa(n))
}

// Limit sets a limit of the first container and, as the API server
// defaults it, the equal request.
func (b *PodBuilder) Limit(name corev1.ResourceName, q string) *PodBuilder {
	return b.Limits(corev1.ResourceList{name: resource.MustParse(q)})
}

// Limits sets each of limits on the first container, and the equal
// requests.
func (b *PodBuilder) Limits(limits corev1.ResourceList) *PodBuilder {
	c := &b.pod.Spec.Containers[0]
	for name, q := range limits {
		c.Resources.Limits[name] = q.DeepCopy()
		c.Resources.Requests[name] = q.DeepCopy()
	}
	return b
}

// Request sets a request of the first container.
func (b *PodBuilder) Request(name corev1.ResourceName, q string) *PodBuilder {
	b.pod.Spec.Containers[0].Resources.Requests[name] = resource.MustParse(q)
	return b
}

// Containers replaces the pod's containers by one per count, named c0,
// c1, ..., each asking for count of the resource name; with no counts the
// pod has no containers, as a pod whose spec is not known.
func (b *PodBuilder) Containers(name corev1.ResourceName, counts ...int64) *PodBuilder {
	b.pod.Spec.Containers = nil
	for i, n := range counts {
		l := corev1.ResourceList{name: *resource.NewQuantity(n, resource.DecimalSI)}
		b.pod.Spec.Containers = append(b.pod.Spec.Containers, corev1.Container{Name: "c" + strconv.Itoa(i),
			Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}})
	}
	return b
}

// Image sets the image of every container.
func (b *PodBuilder) Image(image string) *PodBuilder {
	for i := range b.pod.Spec.Containers {
		b.pod.Spec.Containers[i].Image = image
	}
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(key, value string) *PodBuilder {
	b.pod.Labels[key] = value
	return b
}

// Annotation sets an annotation.
func (b *PodBuilder) Annotation(key, value string) *PodBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[key] = value
	return b
}

// UID sets the pod's UID.
func (b *PodBuilder) UID(uid string) *PodBuilder {
	b.pod.UID = types.UID(uid)
	return b
}

// Created sets the creation time, in Unix seconds.
func (b *PodBuilder) Created(unix int64) *PodBuilder {
	b.pod.CreationTimestamp = metav1.Unix(unix, 0)
	return b
}

// SchedulerName picks the scheduler that must place the pod.
func (b *PodBuilder) SchedulerName(name string) *PodBuilder {
	b.pod.Spec.SchedulerName = name
	return b
}

// NodeName binds the pod to a node at creation, bypassing any scheduler.
func (b *PodBuilder) NodeName(node string) *PodBuilder {
	b.pod.Spec.NodeName = node
	return b
}

// NodeSelector requires a node label.
func (b *PodBuilder) NodeSelector(key, value string) *PodBuilder {
	if b.pod.Spec.NodeSelector == nil {
		b.pod.Spec.NodeSelector = map[string]string{}
	}
	b.pod.Spec.NodeSelector[key] = value
	return b
}

// Toleration adds a toleration.
func (b *PodBuilder) Toleration(t corev1.Toleration) *PodBuilder {
	b.pod.Spec.Tolerations = append(b.pod.Spec.Tolerations, t)
	return b
}

// Tolerate tolerates a NoSchedule taint key=value.
func (b *PodBuilder) Tolerate(key, value string) *PodBuilder {
	return b.Toleration(corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: corev1.TaintEffectNoSchedule})
}

// RestartPolicy sets the pod's restart policy.
func (b *PodBuilder) RestartPolicy(p corev1.RestartPolicy) *PodBuilder {
	b.pod.Spec.RestartPolicy = p
	return b
}

// Claim makes the first container use the ResourceClaim claim under the
// pod-level name name.
func (b *PodBuilder) Claim(name, claim string) *PodBuilder {
	return b.podClaim(corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claim)})
}

// ClaimTemplate makes the first container use a claim made for the pod
// from the ResourceClaimTemplate template.
func (b *PodBuilder) ClaimTemplate(name, template string) *PodBuilder {
	return b.podClaim(corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)})
}

func (b *PodBuilder) podClaim(rc corev1.PodResourceClaim) *PodBuilder {
	b.pod.Spec.ResourceClaims = append(b.pod.Spec.ResourceClaims, rc)
	c := &b.pod.Spec.Containers[0]
	c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: rc.Name})
	return b
}

// Phase sets the pod's status phase.
func (b *PodBuilder) Phase(p corev1.PodPhase) *PodBuilder {
	b.pod.Status.Phase = p
	return b
}

// Obj returns a copy of the built Pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }

// HostPort makes the first container bind port on every address of its
// node, over TCP (a containerPort of the same number with that hostPort).
func (b *PodBuilder) HostPort(port int32) *PodBuilder {
	c := &b.pod.Spec.Containers[0]
	c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
	return b
}
