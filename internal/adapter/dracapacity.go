package adapter

import (
	"fmt"

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

// maxShareMemoryMiB bounds the memory a capacity request may name (1 PiB).
const maxShareMemoryMiB = 1 << 30

// capacityShare reads the capacity a request asks for: memory (bytes, as
// MiB rounded up) and compute (percent, as milli-GPU). It refuses what
// the core cannot model as a share of one GPU.
func capacityShare(field string, x *resourceapi.ExactDeviceRequest, count int64) (milli, memMiB int64, err error) {
	if count != 1 {
		return 0, 0, fmt.Errorf("%s.exactly.count: %d devices with capacity: gpuplane-scheduler places a capacity request as a share of one GPU: ask for count 1", field, count)
	}
	for name, q := range x.Capacity.Requests {
		switch name {
		case apidra.CapacityMemory:
			v := q.Value()
			if v <= 0 || v>>20 > maxShareMemoryMiB {
				return 0, 0, fmt.Errorf("%s.exactly.capacity.requests[%q]: %s: want a positive amount of at most 1Pi", field, name, q.String())
			}
			memMiB = (v + 1<<20 - 1) >> 20
		case apidra.CapacityCompute:
			v := q.Value()
			if v < 0 || v > 100 {
				return 0, 0, fmt.Errorf("%s.exactly.capacity.requests[%q]: %s: want 0 to 100 percent of the GPU", field, name, q.String())
			}
			milli = v * model.MilliPerGPU / 100
		default:
			return 0, 0, fmt.Errorf("%s.exactly.capacity.requests[%q]: not a capacity gpuplane-scheduler shares; ask for %s or %s", field, name, apidra.CapacityMemory, apidra.CapacityCompute)
		}
	}
	if milli == model.MilliPerGPU {
		// The whole GPU's compute is a whole GPU to the core's books,
		// but the allocator still takes it as a share: keep it a share.
		milli = model.MilliPerGPU - 1
	}
	return milli, memMiB, nil
}

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
