package nvml

import (
	"context"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// The two NVML entry points of a GPU's fabric info. Drivers before R525
// have neither; R550 added the versioned one and deprecated the other. A
// call to a symbol the loaded library lacks kills the process, so each is
// looked up before it is called.
const (
	symFabricInfo  = "nvmlDeviceGetGpuFabricInfo"
	symFabricInfoV = "nvmlDeviceGetGpuFabricInfoV"
)

var _ gpu.FabricReader = (*Backend)(nil)

// fabricInfoV reads the versioned fabric info (version 2) of a GPU.
func fabricInfoV(h gonvml.Device) (gonvml.GpuFabricInfo_v2, gonvml.Return) {
	return h.GetGpuFabricInfoV().V2()
}

// GPUFabric implements gpu.FabricReader with NVML's GPU fabric info: the
// first entry point the driver has, in GPU Feature Discovery's order. A
// driver with neither, or a GPU that answers NOT_SUPPORTED, has no fabric
// (an error wrapping gpu.ErrNotSupported).
func (b *Backend) GPUFabric(_ context.Context, index int) (gpu.Fabric, error) {
	h, err := b.handle(index)
	if err != nil {
		return gpu.Fabric{}, err
	}
	op := fmt.Sprintf("gpu %d: reading the GPU fabric info", index)
	ext := b.lib.Extensions()
	switch {
	case ext.LookupSymbol(symFabricInfo) == nil:
		info, ret := h.GetGpuFabricInfo()
		if ret != gonvml.SUCCESS {
			return gpu.Fabric{}, retError(op, ret)
		}
		return fabric(info.ClusterUuid, info.CliqueId, info.State, info.Status), nil
	case ext.LookupSymbol(symFabricInfoV) == nil:
		info, ret := b.fabricV(h)
		if ret != gonvml.SUCCESS {
			return gpu.Fabric{}, retError(op, ret)
		}
		return fabric(info.ClusterUuid, info.CliqueId, info.State, info.Status), nil
	}
	return gpu.Fabric{}, fmt.Errorf("%s: %w: the driver's NVML has neither %s nor %s (drivers before R525)", op, gpu.ErrNotSupported, symFabricInfo, symFabricInfoV)
}

// fabric converts NVML's fields. An all-zero cluster UUID stays empty, so
// that it never names a fabric.
func fabric(cluster [16]uint8, clique uint32, state uint8, status uint32) gpu.Fabric {
	f := gpu.Fabric{CliqueID: clique, State: gpu.FabricState(state)}
	if cluster != [16]uint8{} {
		f.ClusterUUID = uuid.UUID(cluster).String()
	}
	if ret := gonvml.Return(status); ret != gonvml.SUCCESS {
		f.Status = fmt.Errorf("fabric registration failed: %s", ret.Error())
	}
	return f
}
