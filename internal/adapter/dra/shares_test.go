package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// TestShares checks the GPU share a device and an allocation result
// stand for.
func TestShares(t *testing.T) {
	devs := []*Device{
		{Pool: "a", Name: "gpu-0", Dev: &resourceapi.Device{Name: "gpu-0"}},
		nil,
		{Pool: "a", Slices: 7, MIGs: []*Device{{Pool: "a", Name: "gpu-2-mig-1g", Slices: 1}, {Pool: "a", Name: "gpu-2-mig-3g", Slices: 3}}},
	}
	gpus := []model.GPU{{Index: 0, MemoryMiB: 81920}, {Index: 1, MemoryMiB: 81920}, {Index: 2, MIGSlices: 7}}
	for _, tt := range []struct {
		name, driver, pool, device string
		want                       model.GPUShare
		ok                         bool
	}{
		{name: "whole GPU", driver: apidra.DriverName, pool: "a", device: "gpu-0", want: model.GPUShare{Index: 0, Milli: model.MilliPerGPU, MemoryMiB: 81920}, ok: true},
		{name: "MIG device", driver: apidra.DriverName, pool: "a", device: "gpu-2-mig-3g", want: model.GPUShare{Index: 2, MIGSlices: 3}, ok: true},
		{name: "other driver", driver: "other.example.com", pool: "a", device: "gpu-0"},
		{name: "other pool", driver: apidra.DriverName, pool: "b", device: "gpu-0"},
		{name: "unknown device", driver: apidra.DriverName, pool: "a", device: "gpu-9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := DeviceShare(devs, gpus, tt.driver, tt.pool, tt.device)
			if ok != tt.ok || got != tt.want {
				t.Errorf("DeviceShare = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	gpu := &model.GPU{Index: 0, MemoryMiB: 81920}
	for _, tt := range []struct {
		name string
		r    resourceapi.DeviceRequestAllocationResult
		want model.GPUShare
	}{
		{name: "whole", r: resourceapi.DeviceRequestAllocationResult{Device: "gpu-0"}, want: model.GPUShare{Index: 0, Milli: model.MilliPerGPU, MemoryMiB: 81920}},
		{name: "memory share rounds up", r: resourceapi.DeviceRequestAllocationResult{Device: "gpu-0", ShareID: ptr.To[types.UID]("s"),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{apidra.CapacityMemory: resource.MustParse("1025Ki")}}, want: model.GPUShare{Index: 0, MemoryMiB: 2}},
		{name: "compute share", r: resourceapi.DeviceRequestAllocationResult{Device: "gpu-0", ShareID: ptr.To[types.UID]("s"),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{apidra.CapacityCompute: resource.MustParse("25")}}, want: model.GPUShare{Index: 0, Milli: model.MilliPerGPU / 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ResultShare(gpu, 0, &tt.r); got != tt.want {
				t.Errorf("ResultShare = %+v, want %+v", got, tt.want)
			}
		})
	}
}
