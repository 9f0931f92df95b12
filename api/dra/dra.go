// Package dra is gpuplane's Dynamic Resource Allocation contract
// (resource.k8s.io/v1): the driver name gpuplane-agent publishes its
// ResourceSlices under and gpuplane-scheduler allocates from, the names of
// the device attributes, capacities and shared counters both sides read,
// the device taints the agent sets, the DeviceClasses it ships, and the
// opaque per-claim configuration (GpuConfig, MigDeviceConfig) with its
// strict decoder.
//
// Attribute names and value types follow NVIDIA's DRA driver for GPUs
// (k8s-dra-driver-gpu), so that a CEL selector written for it
// (device.attributes["gpu.nvidia.com"].productName) carries over by
// changing only the driver's domain. Attributes are qualified by
// DriverName in CEL: device.attributes["gpu.gpuplane.io"].productName.
//
// This package must not import anything of gpuplane's internal/ tree: the
// agent, the scheduler and the CLI all import it.
package dra

// DriverName is the DRA driver gpuplane-agent registers with the kubelet and
// names in its ResourceSlices, DeviceClasses and claim allocations.
const DriverName = "gpu.gpuplane.io"

// Device types, the value of AttrType.
const (
	// TypeGPU is a whole GPU.
	TypeGPU = "gpu"
	// TypeMIG is a MIG instance of a GPU.
	TypeMIG = "mig"
)

// Device attribute names, unqualified (DriverName is their domain). The
// version-typed ones (cudaComputeCapability, driverVersion,
// cudaDriverVersion) hold semantic versions ("9.0.0", "560.35.3",
// "12.6.0"), compared in CEL with semver(): as NVIDIA's driver does.
const (
	AttrType                  = "type"
	AttrUUID                  = "uuid"
	AttrIndex                 = "index"
	AttrMinor                 = "minor"
	AttrProductName           = "productName"
	AttrBrand                 = "brand"
	AttrArchitecture          = "architecture"
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrCUDADriverVersion     = "cudaDriverVersion"
	// AttrPCIeBusID is the GPU's PCI bus ID ("0000:1b:00.0"); NVIDIA's
	// driver spells it pcieBusID.
	AttrPCIeBusID = "pcieBusID"
	// AttrPCIeRoot is Kubernetes' standard attribute, qualified by its own
	// domain rather than DriverName: GPUs under one PCIe root complex share
	// its value, so a claim's matchAttribute constraint on it keeps them
	// together.
	AttrPCIeRoot = "resource.kubernetes.io/pcieRoot"
	// AttrNVLinkDomain names the NVLink island a GPU belongs to on its node
	// (every GPU of a DGX's NVSwitch fabric has the same value; a GPU with
	// no NVLink has its own). A matchAttribute constraint on it puts a
	// multi-GPU claim on GPUs that reach each other over NVLink.
	AttrNVLinkDomain = "nvlinkDomain"
	// AttrMIGProfile names a MIG device's profile ("1g.10gb").
	AttrMIGProfile = "profile"
	// AttrParentUUID and AttrParentIndex name the GPU a MIG device lives on.
	AttrParentUUID  = "parentUUID"
	AttrParentIndex = "parentIndex"
	// AttrMIGPlacementStart and AttrMIGPlacementSize are where a MIG
	// device sits among its GPU's memory slices.
	AttrMIGPlacementStart = "placementStart"
	AttrMIGPlacementSize  = "placementSize"
)

// Capacity names.
const (
	// CapacityMemory is a device's memory in bytes.
	CapacityMemory = "memory"
	// CapacityMultiprocessors is a device's streaming multiprocessors.
	CapacityMultiprocessors = "multiprocessors"
	// CapacityCompute is the percent of a shared GPU's compute a claim
	// takes (consumable capacity; 100 is the whole GPU).
	CapacityCompute = "compute"
)

// Shared counters of a GPU in MIG mode: one counter set per GPU
// ("gpu-<index>-counters"), from which every MIG device of the GPU
// consumes its compute slices and the memory slices of its placement.
const (
	// CounterComputeSlices is the GPU's MIG compute slices (7 on an H100).
	CounterComputeSlices = "compute-slices"
	// CounterMemorySlicePrefix starts the name of one counter per memory
	// slice ("memory-slice-0" ... "memory-slice-7"), each of capacity 1, so
	// that two MIG devices whose placements overlap never fit together.
	CounterMemorySlicePrefix = "memory-slice-"
)

// Device taints the agent sets on devices in its ResourceSlices. Claims
// that do not tolerate them are not allocated the device.
const (
	// TaintUnhealthy marks a GPU (or MIG device of a GPU) that health
	// checking found broken; the value is the reason (an XID, "lost").
	TaintUnhealthy = DriverName + "/unhealthy"
	// TaintDevicePlugin marks a device that the node's device plugin has
	// given a pod (nvidia.com/gpu, nvidia.com/mig-*): one ledger serves
	// both, so DRA must not hand it out as well.
	TaintDevicePlugin = DriverName + "/device-plugin"
	// TaintMIGLayout marks a MIG device that cannot be created because an
	// instance of the GPU's current layout (not made for a claim) overlaps
	// its placement.
	TaintMIGLayout = DriverName + "/mig-layout"
	// TaintMIGChanging marks every device of a GPU whose MIG layout the
	// agent is changing (nvidia.com/mig.config): the GPU's devices are
	// about to be replaced, so no claim is allocated one until the
	// ResourceSlice shows the new layout.
	TaintMIGChanging = DriverName + "/mig-changing"
)

// PodClaimsAnnotation records on a pod the CDI devices its node prepared
// for its ResourceClaims, as JSON: the pod's claim reference name (the name
// in spec.resourceClaims, or the claim's own name for the claim of
// extended resources) to the CDI device IDs the container runtime got. The
// simulated node writes it, as it writes gpupod.AllocationAnnotation for
// the device plugin's devices.
const PodClaimsAnnotation = "gpuplane.io/dra-claims"
