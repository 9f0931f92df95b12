package adapter

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Consumable capacity: a claim that asks for capacity.requests of one GPU
// published with allowMultipleAllocations is, to the core, a share of one
// GPU of its device set (model.Request.GPUMemoryMiB and GPUMilli, from
// the memory and compute it asks); the structured allocator, run on the
// GPU the core chose, records what the share consumed in the allocation,
// and that consumedCapacity is the share every later snapshot counts.

// resultShare is what one allocation result holds of GPU g of node ni
// (dra.ResultShare).
func resultShare(ni *nodeInfo, g int, r *resourceapi.DeviceRequestAllocationResult) model.GPUShare {
	return dra.ResultShare(&ni.m.GPUs[g], g, r)
}
