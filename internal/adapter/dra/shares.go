package dra

import (
	resourceapi "k8s.io/api/resource/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// DeviceShare returns the GPU share a node's device stands for, given the
// node's devices aligned with its GPUs: a whole GPU, or a MIG device's
// compute slices of its GPU; false if the device is none of the node's
// GPUs.
func DeviceShare(devs []*Device, gpus []model.GPU, driver, pool, name string) (model.GPUShare, bool) {
	if driver != apidra.DriverName {
		return model.GPUShare{}, false
	}
	for i, d := range devs {
		if d == nil || d.Pool != pool || i >= len(gpus) {
			continue
		}
		if d.Dev != nil && d.Name == name {
			return model.GPUShare{Index: i, Milli: gpus[i].Capacity(), MemoryMiB: gpus[i].MemoryMiB}, true
		}
		for _, mg := range d.MIGs {
			if mg.Name == name {
				return model.GPUShare{Index: i, MIGSlices: mg.Slices}, true
			}
		}
	}
	return model.GPUShare{}, false
}

// ResultShare is what one allocation result holds of GPU g: the consumed
// capacity of a share (memory rounded up to MiB, compute percent as
// milli-GPU), or the whole GPU.
func ResultShare(gpu *model.GPU, g int, r *resourceapi.DeviceRequestAllocationResult) model.GPUShare {
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
