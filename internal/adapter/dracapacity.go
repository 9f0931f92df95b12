package adapter

import (
	resourceapi "k8s.io/api/resource/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Consumable capacity: a claim that asks for capacity.requests of one GPU
// published with allowMultipleAllocations is, to the core, a share of one
// GPU of its device set (model.Request.GPUMemoryMiB and GPUMilli, from
// the memory and compute it asks); the structured allocator, run on the
// GPU the core chose, records what the share consumed in the allocation,
// and that consumedCapacity is the share every later snapshot counts.

// resultShare is what one allocation result holds of GPU g of node ni:
// the consumed capacity of a share, or the whole GPU.
func resultShare(ni *nodeInfo, g int, r *resourceapi.DeviceRequestAllocationResult) model.GPUShare {
	gpu := &ni.m.GPUs[g]
	if r.ShareID == nil && len(r.ConsumedCapacity) == 0 {
		return model.GPUShare{Index: g, Milli: gpu.Capacity(), MemoryMiB: gpu.MemoryMiB}
	}
	s := model.GPUShare{Index: g}
	if q, ok := r.ConsumedCapacity[apidra.CapacityMemory]; ok {
		s.MemoryMiB = (q.Value() + 1<<20 - 1) >> 20
	}
	if q, ok := r.ConsumedCapacity[apidra.CapacityCompute]; ok {
		s.Milli = q.Value() * model.MilliPerGPU / 100
	}
	return s
}
