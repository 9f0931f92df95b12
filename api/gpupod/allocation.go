package gpupod

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Annotations on pods that gpuplane's processes write and read.
const (
	// GPUsAnnotation records on a bound pod which GPU indexes (and, for
	// shares, how much of each) gpuplane-scheduler gave it: "0,1" for
	// whole GPUs, "3:250" for a quarter of GPU 3, "2:m3" for a 3-slice MIG
	// instance on GPU 2 (FormatGPUs, ParseGPUs). The binding carries it,
	// so it lands on the pod with the node name; the node's agent gives
	// the pod's containers exactly these GPUs (deviceplugin.Steerer).
	GPUsAnnotation = "gpuplane.io/gpus"
	// HeldAnnotation records on a pod the GPUs its node's kubelet gave its
	// containers, in GPUsAnnotation's format, as gpuplane-agent reads them
	// from the PodResources API once the pod is admitted. It is the node's
	// word: where it differs from GPUsAnnotation (the chosen GPUs were taken
	// or unhealthy, or two pods with identical requests were admitted in
	// the other order), gpuplane-scheduler's books follow it.
	HeldAnnotation = "gpuplane.io/gpus-held"
	// QueueAnnotation records on a pod gpuplane-scheduler bound the Queue
	// whose quota its usage counts against, as the scheduler resolved it
	// (the PodGroup's queue, the pod's queue label, Kueue's, the
	// namespace's default). The binding carries it; gpuplane-agent exports
	// it beside the pod's GPU share (gpuplane_pod_queue_info), so that GPU
	// time can be summed per queue from Prometheus (gpuplane cost).
	QueueAnnotation = "gpuplane.io/queue"
	// AllocationAnnotation holds the pod's device allocation as JSON (a
	// PodAllocation), written by the simulated node before the pod is
	// reported Running.
	AllocationAnnotation = "gpuplane.io/allocation"
	// DurationAnnotation makes a running pod end after this long (a Go
	// duration, e.g. "30s"). Without it the pod runs until deleted.
	DurationAnnotation = "gpuplane.io/sim-duration"
	// ExitCodeAnnotation is the exit code of the pod's containers when its
	// duration ends: 0 (the default) means Succeeded, anything else Failed.
	ExitCodeAnnotation = "gpuplane.io/sim-exit-code"
)

// PodAllocation is what the node gave a pod's containers, as the container
// runtime would have received it from the kubelet.
type PodAllocation struct {
	// Node is the node that made the allocation.
	Node string `json:"node"`
	// Containers lists the containers (init containers first) that were
	// given devices.
	Containers []ContainerAllocation `json:"containers"`
}

// ContainerAllocation is one container's share of the node's devices.
type ContainerAllocation struct {
	// Name is the container's name.
	Name string `json:"name"`
	// Init marks an init container; the containers after it reuse its
	// devices, and PodResources does not list it (as the kubelet does not).
	Init bool `json:"init,omitempty"`
	// Devices maps each device-plugin resource to the device IDs allocated.
	Devices map[string][]string `json:"devices"`
	// Env holds the environment the plugins asked for, e.g.
	// NVIDIA_VISIBLE_DEVICES.
	Env map[string]string `json:"env,omitempty"`
	// CDIDevices are the fully qualified CDI device names the plugins asked
	// the runtime to inject.
	CDIDevices []string `json:"cdiDevices,omitempty"`
	// Mounts are the host paths the plugins asked to mount.
	Mounts []Mount `json:"mounts,omitempty"`
	// DeviceNodes are the host device nodes the plugins asked to expose.
	DeviceNodes []string `json:"deviceNodes,omitempty"`
	// Annotations are the runtime annotations the plugins asked for.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Mount is a host path mounted into a container.
type Mount struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// LonePodGroupPrefix starts the name of the group a pod without a
// PodGroup forms on its own: "pod/<namespace>/<name>".
const LonePodGroupPrefix = "pod/"

// MaxAllocationBytes bounds the allocation annotation: the record of a pod
// with every device of the largest node is a few KiB.
const MaxAllocationBytes = 64 << 10

// ReadAllocation returns the allocation recorded on pod, or nil when there
// is none. A record that is too large or not the format is an error.
func ReadAllocation(pod *corev1.Pod) (*PodAllocation, error) {
	raw, ok := pod.Annotations[AllocationAnnotation]
	if !ok {
		return nil, nil
	}
	if len(raw) > MaxAllocationBytes {
		return nil, fmt.Errorf("reading annotation %s of pod %s/%s: %d bytes, more than the %d a record needs", AllocationAnnotation, pod.Namespace, pod.Name, len(raw), MaxAllocationBytes)
	}
	var a PodAllocation
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return nil, fmt.Errorf("reading annotation %s of pod %s/%s: %w", AllocationAnnotation, pod.Namespace, pod.Name, err)
	}
	return &a, nil
}

// FormatAllocation renders a as AllocationAnnotation's value, which
// ReadAllocation reads back.
func FormatAllocation(a *PodAllocation) (string, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encoding annotation %s: %w", AllocationAnnotation, err)
	}
	return string(b), nil
}

// DeviceIDs returns every device ID of resource in the allocation.
func (a *PodAllocation) DeviceIDs(resource string) []string {
	var ids []string
	for _, c := range a.Containers {
		ids = append(ids, c.Devices[resource]...)
	}
	return ids
}
