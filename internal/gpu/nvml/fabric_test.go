package nvml

import (
	"errors"
	"fmt"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestGPUFabric(t *testing.T) {
	cluster := [16]uint8{0x7b, 0x96, 0x8a, 0x6d, 0xc8, 0xaa, 0x45, 0xe1, 0x9e, 0x07, 0xe1, 0xe5, 0x1b, 0xe9, 0x9c, 0x31}
	const clusterStr = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
	v1 := func(info gonvml.GpuFabricInfo, ret gonvml.Return) func() (gonvml.GpuFabricInfo, gonvml.Return) {
		return func() (gonvml.GpuFabricInfo, gonvml.Return) { return info, ret }
	}
	tests := []struct {
		name string
		// symbols the driver's library exports.
		symbols []string
		v1      func() (gonvml.GpuFabricInfo, gonvml.Return)
		v2      gonvml.GpuFabricInfo_v2
		v2Ret   gonvml.Return
		want    gpu.Fabric
		wantErr error
		// wantStatus says the fabric carries a registration failure.
		wantStatus bool
	}{
		{name: "completed through the first call", symbols: []string{symFabricInfo, symFabricInfoV},
			v1:   v1(gonvml.GpuFabricInfo{ClusterUuid: cluster, CliqueId: 1, State: gonvml.GPU_FABRIC_STATE_COMPLETED}, gonvml.SUCCESS),
			want: gpu.Fabric{ClusterUUID: clusterStr, CliqueID: 1, State: gpu.FabricCompleted}},
		{name: "in progress", symbols: []string{symFabricInfo},
			v1:   v1(gonvml.GpuFabricInfo{State: gonvml.GPU_FABRIC_STATE_IN_PROGRESS}, gonvml.SUCCESS),
			want: gpu.Fabric{State: gpu.FabricInProgress}},
		{name: "registration failed", symbols: []string{symFabricInfo},
			v1:   v1(gonvml.GpuFabricInfo{ClusterUuid: cluster, CliqueId: 3, State: gonvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(gonvml.ERROR_UNKNOWN)}, gonvml.SUCCESS),
			want: gpu.Fabric{ClusterUUID: clusterStr, CliqueID: 3, State: gpu.FabricCompleted}, wantStatus: true},
		{name: "GPU without a fabric", symbols: []string{symFabricInfo},
			v1:      v1(gonvml.GpuFabricInfo{}, gonvml.ERROR_NOT_SUPPORTED),
			wantErr: gpu.ErrNotSupported},
		{name: "only the versioned call", symbols: []string{symFabricInfoV},
			v2:   gonvml.GpuFabricInfo_v2{ClusterUuid: cluster, CliqueId: 32766, State: gonvml.GPU_FABRIC_STATE_COMPLETED},
			want: gpu.Fabric{ClusterUUID: clusterStr, CliqueID: 32766, State: gpu.FabricCompleted}},
		{name: "versioned call not supported", symbols: []string{symFabricInfoV},
			v2Ret: gonvml.ERROR_NOT_SUPPORTED, wantErr: gpu.ErrNotSupported},
		// The mock's GetGpuFabricInfo panics when called: a driver without
		// the symbol must never see the call.
		{name: "driver without either call", wantErr: gpu.ErrNotSupported},
		{name: "GPU lost", symbols: []string{symFabricInfo},
			v1:      v1(gonvml.GpuFabricInfo{}, gonvml.ERROR_GPU_IS_LOST),
			wantErr: gpu.ErrGPULost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := dgxb200.New()
			lib.LookupSymbolFunc = func(sym string) error {
				for _, s := range tt.symbols {
					if s == sym {
						return nil
					}
				}
				return fmt.Errorf("undefined symbol: %s", sym)
			}
			for _, d := range lib.Devices {
				d.(*server.Device).GetGpuFabricInfoFunc = tt.v1
			}
			b, err := Open(Options{Library: lib})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			calledV2 := false
			b.fabricV = func(gonvml.Device) (gonvml.GpuFabricInfo_v2, gonvml.Return) {
				calledV2 = true
				return tt.v2, tt.v2Ret
			}
			got, err := b.GPUFabric(t.Context(), 2)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("GPUFabric error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got.Status != nil) != tt.wantStatus {
				t.Errorf("status = %v, want a failure: %v", got.Status, tt.wantStatus)
			}
			if got.Attached() != (tt.want.State == gpu.FabricCompleted && !tt.wantStatus && tt.want.ClusterUUID != "") {
				t.Errorf("Attached() = %v", got.Attached())
			}
			got.Status = nil
			if got != tt.want {
				t.Errorf("GPUFabric = %+v, want %+v", got, tt.want)
			}
			usesV2 := len(tt.symbols) == 1 && tt.symbols[0] == symFabricInfoV
			if calledV2 != usesV2 {
				t.Errorf("versioned call made: %v, want %v", calledV2, usesV2)
			}
		})
	}
}
