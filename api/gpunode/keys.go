package gpunode

// LabelPrefix is the prefix of the GPU feature labels, NVIDIA GPU Feature
// Discovery's, so node selectors written for it keep matching.
const LabelPrefix = "nvidia.com/"

// Keys of the GPU feature labels other parts of gpuplane read. The agent's
// labelers build their keys from LabelPrefix and the resource they
// describe; these name the ones for nvidia.com/gpu.
const (
	// LabelGPUProduct is the GPU's product name as NVML reports it, with
	// spaces as dashes ("NVIDIA-H100-80GB-HBM3").
	LabelGPUProduct = LabelPrefix + "gpu.product"
	// LabelGPUMemory is one GPU's framebuffer in MiB.
	LabelGPUMemory = LabelPrefix + "gpu.memory"
	// LabelGPUCount is the number of physical GPUs on the node.
	LabelGPUCount = LabelPrefix + "gpu.count"
	// LabelGPUReplicas is how many replicas each GPU is shared into
	// (time-slicing or MPS); 1 or absent when not shared.
	LabelGPUReplicas = LabelPrefix + "gpu.replicas"
	// LabelGPUSharingStrategy is "time-slicing", "mps" or "none".
	LabelGPUSharingStrategy = LabelPrefix + "gpu.sharing-strategy"
	// LabelMIGStrategy is the MIG strategy: "none", "single" or "mixed".
	LabelMIGStrategy = LabelPrefix + "mig.strategy"
)

// ConditionGPUReady is the Node condition gpuplane-agent keeps on its Node:
// True when the node offers its GPUs (driver loaded, device plugin
// registered with the kubelet, GPU events watched); False with the first
// failing check as the reason (Condition* reasons) and the fix in the
// message.
const ConditionGPUReady = "GPUReady"

// Reasons of ConditionGPUReady.
const (
	ReasonAgentReady                = "AgentReady"
	ReasonDriverNotLoaded           = "DriverNotLoaded"
	ReasonNoGPUs                    = "NoGPUs"
	ReasonDevicePluginNotRegistered = "DevicePluginNotRegistered"
	ReasonHealthMonitorDown         = "HealthMonitorDown"
	ReasonDeviceNodesMissing        = "DeviceNodesMissing"
	ReasonMIGModeChangePending      = "MIGModeChangePending"
	ReasonCDISpecsMissing           = "CDISpecsMissing"
)

// TopologyAnnotation is the Node annotation describing the GPUs' NVLink
// islands; the package doc gives its format.
const TopologyAnnotation = "gpuplane.io/gpu-topology"

// Bounds on what a Node may say about its GPUs. A value outside them is
// refused, not clamped: it means a broken writer, and acting on it would
// misplace pods.
const (
	// MaxGPUs is the most GPUs one node may have. The largest GPU servers
	// sold carry 8 to 16; 64 leaves room without letting a typo cost the
	// scheduler memory.
	MaxGPUs = 64
	// MaxReplicas is the most replicas one shared GPU may be split into:
	// the scheduler counts shares in thousandths of a GPU, so a replica
	// must be at least one of them.
	MaxReplicas = 1000
	// MaxGPUMemoryMiB bounds one GPU's memory (16 TiB).
	MaxGPUMemoryMiB = 1 << 24
	// MaxNVLinks bounds the NVLink count between two GPUs.
	MaxNVLinks = 1024
	// MaxNUMANode bounds a NUMA node number.
	MaxNUMANode = 1 << 16
	// MaxAnnotationBytes bounds the topology annotation's size: a valid
	// one for MaxGPUs GPUs is well under 2 KiB.
	MaxAnnotationBytes = 16 << 10
)

// ConfigLabel on a Node picks which of the agent's named configs
// (--config-dir, the chart's config.map) the node uses, as NVIDIA's device
// plugin's config manager reads it.
const ConfigLabel = "nvidia.com/device-plugin.config"

// EnvSimulate names a simulated GPU profile for gpuplane-agent when its
// --simulate flag is not given: a node simulator hands its simulated GPUs
// to the agent's pod this way, as a container runtime hands it real ones.
const EnvSimulate = "GPUPLANE_SIMULATE"
