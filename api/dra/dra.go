// Package dra is gpuplane's Dynamic Resource Allocation contract
// (resource.k8s.io/v1): the driver name gpuplane-agent publishes its
// ResourceSlices under and gpuplane-scheduler allocates from, and the names
// of the device attributes and capacities both sides read.
//
// Attribute names follow NVIDIA's DRA driver for GPUs, so that a CEL
// selector written for it (device.attributes["gpu.nvidia.com"].productName)
// carries over by changing only the driver's domain. Attributes are
// qualified by DriverName in CEL: device.attributes["gpu.gpuplane.io"].
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

// Device attribute names, unqualified (DriverName is their domain).
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
	AttrPCIBusID              = "pciBusID"
	// AttrPCIeRoot is Kubernetes' standard attribute, qualified by its own
	// domain rather than DriverName.
	AttrPCIeRoot = "resource.kubernetes.io/pcieRoot"
	// AttrMIGProfile names a MIG device's profile ("1g.10gb").
	AttrMIGProfile = "profile"
	// AttrParentUUID and AttrParentIndex name the GPU a MIG device lives on.
	AttrParentUUID  = "parentUUID"
	AttrParentIndex = "parentIndex"
)

// Capacity names.
const (
	// CapacityMemory is a device's memory in bytes.
	CapacityMemory = "memory"
)
