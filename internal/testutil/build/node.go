package build

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels GPU Feature Discovery puts on GPU nodes.
const (
	LabelGPUProduct = "nvidia.com/gpu.product"
	LabelGPUCount   = "nvidia.com/gpu.count"
	LabelGPUMemory  = "nvidia.com/gpu.memory"
)

// NodeBuilder builds a Node. Start with Node.
type NodeBuilder struct{ node corev1.Node }

// Node returns a builder for a node with no labels or annotations, and of
// resources only what every kubelet reports: room for 110 pods (a node
// without it takes no pod) and its root filesystem as ephemeral-storage
// (a pod that asks some, as operators' init containers do, fits only
// where it is reported); Pods and Resource change them.
func Node(name string) *NodeBuilder {
	b := &NodeBuilder{node: corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Status:     corev1.NodeStatus{Capacity: corev1.ResourceList{}, Allocatable: corev1.ResourceList{}},
	}}
	return b.Pods(defaultPods).Resource(corev1.ResourceEphemeralStorage, defaultEphemeralStorage)
}

// defaultEphemeralStorage is the root filesystem a built node reports.
const defaultEphemeralStorage = "1Ti"

// defaultPods is the kubelet's default --max-pods.
const defaultPods = 110

// GPUs sets the node's nvidia.com/gpu capacity and allocatable, and its
// GPU count label as GPU Feature Discovery would.
func (b *NodeBuilder) GPUs(n int) *NodeBuilder {
	b.node.Labels[LabelGPUCount] = strconv.Itoa(n)
	return b.resource(ResourceGPU, *resource.NewQuantity(int64(n), resource.DecimalSI))
}

// Product sets the GPU model label and the per-GPU memory (MiB) label.
func (b *NodeBuilder) Product(product string, memoryMiB int) *NodeBuilder {
	b.node.Labels[LabelGPUProduct] = product
	b.node.Labels[LabelGPUMemory] = strconv.Itoa(memoryMiB)
	return b
}

// CPU sets cpu capacity and allocatable.
func (b *NodeBuilder) CPU(q string) *NodeBuilder { return b.Resource(corev1.ResourceCPU, q) }

// Memory sets memory capacity and allocatable.
func (b *NodeBuilder) Memory(q string) *NodeBuilder { return b.Resource(corev1.ResourceMemory, q) }

// Pods sets how many pods the node accepts.
func (b *NodeBuilder) Pods(n int) *NodeBuilder {
	return b.resource(corev1.ResourcePods, *resource.NewQuantity(int64(n), resource.DecimalSI))
}

// Resource sets any resource's capacity and allocatable.
func (b *NodeBuilder) Resource(name corev1.ResourceName, q string) *NodeBuilder {
	return b.resource(name, resource.MustParse(q))
}

// Resources sets each resource of list as capacity and allocatable.
func (b *NodeBuilder) Resources(list corev1.ResourceList) *NodeBuilder {
	for name, q := range list {
		b.resource(name, q)
	}
	return b
}

func (b *NodeBuilder) resource(name corev1.ResourceName, q resource.Quantity) *NodeBuilder {
	b.node.Status.Capacity[name] = q.DeepCopy()
	b.node.Status.Allocatable[name] = q.DeepCopy()
	return b
}

// Label sets a label.
func (b *NodeBuilder) Label(key, value string) *NodeBuilder {
	b.node.Labels[key] = value
	return b
}

// Labels sets each label of m.
func (b *NodeBuilder) Labels(m map[string]string) *NodeBuilder {
	for k, v := range m {
		b.node.Labels[k] = v
	}
	return b
}

// Annotation sets an annotation.
func (b *NodeBuilder) Annotation(key, value string) *NodeBuilder {
	b.node.Annotations[key] = value
	return b
}

// Annotations sets each annotation of m.
func (b *NodeBuilder) Annotations(m map[string]string) *NodeBuilder {
	for k, v := range m {
		b.node.Annotations[k] = v
	}
	return b
}

// Taint adds a taint.
func (b *NodeBuilder) Taint(key, value string, effect corev1.TaintEffect) *NodeBuilder {
	b.node.Spec.Taints = append(b.node.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return b
}

// Obj returns a copy of the built Node.
func (b *NodeBuilder) Obj() *corev1.Node { return b.node.DeepCopy() }
