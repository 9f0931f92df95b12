package framework

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// ResourceGPU is the extended resource of whole NVIDIA GPUs.
const ResourceGPU corev1.ResourceName = gpunode.ResourceGPU

// Labels GPU Feature Discovery puts on GPU nodes; builders set them so that
// tests select nodes the way a real cluster's pods do.
const (
	LabelGPUProduct = "nvidia.com/gpu.product"
	LabelGPUCount   = "nvidia.com/gpu.count"
	LabelGPUMemory  = "nvidia.com/gpu.memory"
)

// PauseImage is the image of built pods; nothing pulls it (kwok runs pods
// without a container runtime).
const PauseImage = "registry.k8s.io/pause:3.10"

// NodeBuilder builds a Node. Start with GPUNode.
type NodeBuilder struct{ node corev1.Node }

// GPUNode returns a builder for a kwok-managed node with 8 H100 GPUs, 128
// CPUs, 2 TiB of memory and room for 110 pods; capacity is written straight
// into the Node's status, as kwok expects.
func GPUNode(name string) *NodeBuilder {
	b := &NodeBuilder{node: corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
			Annotations: map[string]string{
				localcluster.KwokNodeAnnotation: localcluster.KwokNodeAnnotationValue,
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{},
			Allocatable: corev1.ResourceList{},
		},
	}}
	return b.CPU("128").Memory("2Ti").Pods(110).Product("NVIDIA-H100-80GB-HBM3", 81559).GPUs(8)
}

// GPUs sets the node's nvidia.com/gpu capacity and allocatable.
func (b *NodeBuilder) GPUs(n int) *NodeBuilder {
	b.node.Labels[LabelGPUCount] = strconv.Itoa(n)
	return b.resource(ResourceGPU, *resource.NewQuantity(int64(n), resource.DecimalSI))
}

// Product sets the GPU model label and per-GPU memory (MiB) label.
func (b *NodeBuilder) Product(product string, memoryMiB int) *NodeBuilder {
	b.node.Labels[LabelGPUProduct] = product
	b.node.Labels[LabelGPUMemory] = strconv.Itoa(memoryMiB)
	return b
}

// CPU sets cpu capacity and allocatable.
func (b *NodeBuilder) CPU(q string) *NodeBuilder {
	return b.resource(corev1.ResourceCPU, resource.MustParse(q))
}

// Memory sets memory capacity and allocatable.
func (b *NodeBuilder) Memory(q string) *NodeBuilder {
	return b.resource(corev1.ResourceMemory, resource.MustParse(q))
}

// Pods sets how many pods the node accepts.
func (b *NodeBuilder) Pods(n int) *NodeBuilder {
	return b.resource(corev1.ResourcePods, *resource.NewQuantity(int64(n), resource.DecimalSI))
}

// Resource sets any resource's capacity and allocatable.
func (b *NodeBuilder) Resource(name corev1.ResourceName, q string) *NodeBuilder {
	return b.resource(name, resource.MustParse(q))
}

func (b *NodeBuilder) resource(name corev1.ResourceName, q resource.Quantity) *NodeBuilder {
	b.node.Status.Capacity[name] = q
	b.node.Status.Allocatable[name] = q.DeepCopy()
	return b
}

// Label sets a label.
func (b *NodeBuilder) Label(key, value string) *NodeBuilder {
	b.node.Labels[key] = value
	return b
}

// Annotation sets an annotation.
func (b *NodeBuilder) Annotation(key, value string) *NodeBuilder {
	b.node.Annotations[key] = value
	return b
}

// Taint adds a taint.
func (b *NodeBuilder) Taint(key, value string, effect corev1.TaintEffect) *NodeBuilder {
	b.node.Spec.Taints = append(b.node.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return b
}

// NotKwok removes the kwok annotation: kwok leaves the node alone, for tests
// where something else plays its kubelet.
func (b *NodeBuilder) NotKwok() *NodeBuilder {
	delete(b.node.Annotations, localcluster.KwokNodeAnnotation)
	delete(b.node.Labels, "type")
	return b
}

// Obj returns a copy of the built Node.
func (b *NodeBuilder) Obj() *corev1.Node { return b.node.DeepCopy() }

// PodBuilder builds a Pod. Start with Pod.
type PodBuilder struct{ pod corev1.Pod }

// Pod returns a builder for a one-container pod that asks for no GPU and
// tolerates kwok's conventional taint.
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{pod: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "main",
				Image: PauseImage,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{},
					Limits:   corev1.ResourceList{},
				},
			}},
			Tolerations: []corev1.Toleration{{
				Key:      localcluster.KwokNodeAnnotation,
				Operator: corev1.TolerationOpExists,
				Effect:   corev1.TaintEffectNoSchedule,
			}},
		},
	}}
}

// GPUs makes the (first) container ask for n whole GPUs; extended resources
// are requested through limits.
func (b *PodBuilder) GPUs(n int) *PodBuilder {
	return b.Limit(ResourceGPU, strconv.Itoa(n))
}

// Limit sets a limit (and, as the API server would default it, the equal
// request) of the first container.
func (b *PodBuilder) Limit(name corev1.ResourceName, q string) *PodBuilder {
	c := &b.pod.Spec.Containers[0]
	c.Resources.Limits[name] = resource.MustParse(q)
	c.Resources.Requests[name] = resource.MustParse(q)
	return b
}

// Request sets a request of the first container.
func (b *PodBuilder) Request(name corev1.ResourceName, q string) *PodBuilder {
	b.pod.Spec.Containers[0].Resources.Requests[name] = resource.MustParse(q)
	return b
}

// NodeName binds the pod to a node at creation, bypassing any scheduler.
func (b *PodBuilder) NodeName(node string) *PodBuilder {
	b.pod.Spec.NodeName = node
	return b
}

// SchedulerName picks the scheduler that must place the pod.
func (b *PodBuilder) SchedulerName(name string) *PodBuilder {
	b.pod.Spec.SchedulerName = name
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(key, value string) *PodBuilder {
	b.pod.Labels[key] = value
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

// Tolerate tolerates a NoSchedule taint key=value.
func (b *PodBuilder) Tolerate(key, value string) *PodBuilder {
	b.pod.Spec.Tolerations = append(b.pod.Spec.Tolerations, corev1.Toleration{
		Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: corev1.TaintEffectNoSchedule})
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

// RestartPolicy sets the pod's restart policy (Never or OnFailure make kwok's
// pod stages complete it, as for Jobs).
func (b *PodBuilder) RestartPolicy(p corev1.RestartPolicy) *PodBuilder {
	b.pod.Spec.RestartPolicy = p
	return b
}

// Obj returns a copy of the built Pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }
