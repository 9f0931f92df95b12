package adapter

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Coming nodes. A node a node autoscaler just bought registers with the
// API server before its agent has run: it has the GPU feature labels its
// pool gave it, but no GPU resource in its allocatable until the device
// plugin registers them. Read as it is, it has no GPUs, and the pods it
// was bought for would say Unschedulable again, which buys another node.
// Read as it will be (model.Node.Coming), the core lets them wait for it
// and binds nothing there before the GPUs are allocatable.
//
// What the node will offer comes from its gpunode.OfferAnnotation, which
// the node pools gpuplane publishes put on every node they make
// (internal/nodeoffer), or else from its nvidia.com/gpu.count and
// nvidia.com/gpu.replicas labels (a node group template of Cluster
// Autoscaler's carries those): that many GPUs, their replicas advertised
// as nvidia.com/gpu. A node stays coming for ComingNodeTimeout after its
// creation at most; then it counts as it is, and a Warning event on it
// says that its GPUs never registered.

// ReasonGPUsNotRegistered: a node offered GPUs that it had not registered
// ComingNodeTimeout after its creation; it is scheduled as it is.
const ReasonGPUsNotRegistered = "GPUsNotRegistered"

// DefaultComingNodeTimeout is how long a node may take to register the
// GPUs it offers, by default: a cloud GPU node boots, installs its driver
// and starts the agent in a few minutes.
const DefaultComingNodeTimeout = 10 * time.Minute

// registeredGPUs reports whether n's capacity names a GPU resource of the
// device plugin's, zero included: the plugin has registered.
func registeredGPUs(n *corev1.Node) bool {
	for name := range n.Status.Capacity {
		if name == ResourceGPU || name == ResourceGPUShared || strings.HasPrefix(string(name), migResourcePrefix) {
			return true
		}
	}
	for name := range n.Status.Allocatable {
		if name == ResourceGPU || name == ResourceGPUShared || strings.HasPrefix(string(name), migResourcePrefix) {
			return true
		}
	}
	return false
}

// offered is what n says it will offer once its GPUs register: its
// gpunode.OfferAnnotation, else its GPU count and replicas labels; nil
// when it says nothing of GPUs. An offer that does not parse is an error
// naming the field.
func offered(n *corev1.Node) (map[string]int64, error) {
	if s, ok := n.Annotations[gpunode.OfferAnnotation]; ok {
		o, err := gpunode.ParseOffer(s)
		if err != nil {
			return nil, fmt.Errorf("annotation %w", err)
		}
		return o, nil
	}
	s, ok := n.Labels[LabelGPUCount]
	if !ok {
		return nil, nil
	}
	count, err := gpunode.ParseGPUCount(s)
	if err != nil {
		return nil, fmt.Errorf("label %w", err)
	}
	replicas := 1
	if s, ok := n.Labels[LabelGPUReplicas]; ok {
		if replicas, err = gpunode.ParseReplicas(s); err != nil {
			return nil, fmt.Errorf("label %w", err)
		}
	}
	if count == 0 {
		return nil, nil
	}
	return map[string]int64{string(ResourceGPU): int64(count * replicas)}, nil
}

// comingNode returns n as it will be once its GPUs register (a copy with
// the offered resources in its capacity and allocatable), with until, the
// time it stops counting as coming. ok is false when n is not coming: it
// has registered its GPU resources, offers none, or was created
// ComingNodeTimeout or longer before now (expired then says so, with what
// it offered).
func comingNode(n *corev1.Node, timeout time.Duration, now time.Time) (out *corev1.Node, until time.Time, expired string, err error) {
	if registeredGPUs(n) {
		return nil, time.Time{}, "", nil
	}
	o, err := offered(n)
	if err != nil || len(o) == 0 {
		return nil, time.Time{}, "", err
	}
	until = n.CreationTimestamp.Add(timeout)
	if !now.Before(until) {
		return nil, time.Time{}, fmt.Sprintf("the node offers %s but registered none of it within %s of its creation: scheduled as it is, without those GPUs; check its gpuplane-agent",
			gpunode.FormatOffer(o), timeout), nil
	}
	out = n.DeepCopy()
	if out.Status.Capacity == nil {
		out.Status.Capacity = corev1.ResourceList{}
	}
	if out.Status.Allocatable == nil {
		out.Status.Allocatable = corev1.ResourceList{}
	}
	for name, v := range o {
		out.Status.Capacity[corev1.ResourceName(name)] = *resource.NewQuantity(v, resource.DecimalSI)
		out.Status.Allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	// The taints a node carries until it is up (Karpenter's, the node
	// lifecycle controller's) are gone by then: the node as it will be
	// has them no more.
	out.Spec.Taints = nil
	for _, t := range n.Spec.Taints {
		if !startupTaints[t.Key] {
			out.Spec.Taints = append(out.Spec.Taints, t)
		}
	}
	return out, until, "", nil
}

// startupTaints are the taints a node carries only until it is up.
var startupTaints = map[string]bool{
	"karpenter.sh/unregistered":                      true,
	corev1.TaintNodeNotReady:                         true,
	"node.cloudprovider.kubernetes.io/uninitialized": true,
}
