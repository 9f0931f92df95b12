package nvml

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestSetTimeSlice(t *testing.T) {
	tests := []struct {
		name     string
		index    int
		slice    gpu.TimeSlice
		modeRet  gonvml.Return
		smiErr   error
		close    bool
		wantErr  error
		wantSMI  []string
		wantMode bool
	}{
		{name: "long", index: 2, slice: gpu.TimeSliceLong, modeRet: gonvml.SUCCESS, wantSMI: []string{"compute-policy", "-i", "2", "--set-timeslice=3"}, wantMode: true},
		{name: "compute mode refused", index: 1, slice: gpu.TimeSliceShort, modeRet: gonvml.ERROR_NOT_SUPPORTED, wantErr: gpu.ErrNotSupported, wantMode: true},
		{name: "nvidia-smi fails", index: 0, slice: gpu.TimeSliceMedium, modeRet: gonvml.SUCCESS, smiErr: errors.New("exit status 6"), wantErr: errors.New("exit status 6"), wantSMI: []string{"compute-policy", "-i", "0", "--set-timeslice=2"}, wantMode: true},
		{name: "no such GPU", index: 9, slice: gpu.TimeSliceLong, wantErr: gpu.ErrNotFound},
		{name: "closed backend", index: 0, slice: gpu.TimeSliceLong, close: true, wantErr: gpu.ErrClosed},
		{name: "not a slice", index: 0, slice: gpu.TimeSlice(5), wantErr: gpu.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := dgxh100.New()
			modeSet := false
			for _, d := range lib.Devices {
				dev := d.(*server.Device)
				dev.SetComputeModeFunc = func(m gonvml.ComputeMode) gonvml.Return {
					if m != gonvml.COMPUTEMODE_DEFAULT {
						t.Errorf("compute mode %v, want default", m)
					}
					modeSet = true
					return tt.modeRet
				}
			}
			var ran []string
			b, err := Open(Options{Library: lib, SMI: func(_ context.Context, args ...string) error {
				ran = args
				return tt.smiErr
			}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.close {
				_ = b.Close()
			}
			err = b.SetTimeSlice(context.Background(), tt.index, tt.slice)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("SetTimeSlice: %v", err)
			case tt.wantErr != nil && (err == nil || !errors.Is(err, tt.wantErr) && !strings.Contains(err.Error(), tt.wantErr.Error())):
				t.Fatalf("SetTimeSlice = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(ran, tt.wantSMI) {
				t.Errorf("nvidia-smi ran with %q, want %q", ran, tt.wantSMI)
			}
			if modeSet != tt.wantMode {
				t.Errorf("compute mode set = %v, want %v", modeSet, tt.wantMode)
			}
			if tt.wantErr == nil {
				if got, err := b.TimeSlice(context.Background(), tt.index); err != nil || got != tt.slice {
					t.Errorf("TimeSlice = %v, %v; want %v", got, err, tt.slice)
				}
			}
		})
	}
}
