package framework

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// ResourceGPU is the extended resource of whole NVIDIA GPUs.
const ResourceGPU corev1.ResourceName = gpunode.ResourceGPU

// PauseImage is the image of built pods; nothing pulls it (kwok runs pods
// without a container runtime).
const PauseImage = "registry.k8s.io/pause:3.10"

// GPUNode returns a builder for a kwok-managed node with 8 H100 GPUs, 128
// CPUs, 2 TiB of memory and room for 110 pods; capacity is written straight
// into the Node's status, as kwok expects.
func GPUNode(name string) *build.NodeBuilder {
	return UnmanagedGPUNode(name).Label("type", "kwok").
		Annotation(localcluster.KwokNodeAnnotation, localcluster.KwokNodeAnnotationValue)
}

// UnmanagedGPUNode is GPUNode without kwok's marks: kwok leaves the node
// alone, for tests where something else plays its kubelet.
func UnmanagedGPUNode(name string) *build.NodeBuilder {
	return build.Node(name).
		Label("kubernetes.io/hostname", name).Label("kubernetes.io/os", "linux").Label("kubernetes.io/arch", "amd64").
		CPU("128").Memory("2Ti").Pods(110).Product("NVIDIA-H100-80GB-HBM3", 81559).GPUs(8)
}

// Pod returns a builder for a one-container pod of PauseImage that asks for
// no GPU and tolerates kwok's conventional taint.
func Pod(namespace, name string) *build.PodBuilder {
	return build.Pod(namespace, name).Image(PauseImage).Toleration(corev1.Toleration{
		Key:      localcluster.KwokNodeAnnotation,
		Operator: corev1.TolerationOpExists,
		Effect:   corev1.TaintEffectNoSchedule,
	})
}

// PodBuilder and NodeBuilder are build's, named here for the signatures of
// helpers that take the presets above.
type (
	PodBuilder  = build.PodBuilder
	NodeBuilder = build.NodeBuilder
)
