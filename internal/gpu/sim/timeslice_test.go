package sim

import (
	"context"
	"errors"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestTimeSlice(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		set     gpu.TimeSlice
		reset   bool
		lose    bool
		want    gpu.TimeSlice
		wantErr error
	}{
		{name: "long is kept", set: gpu.TimeSliceLong, want: gpu.TimeSliceLong},
		{name: "short is kept", set: gpu.TimeSliceShort, want: gpu.TimeSliceShort},
		{name: "a reset restores the default", set: gpu.TimeSliceMedium, reset: true, want: gpu.TimeSliceDefault},
		{name: "out of range is refused", set: gpu.TimeSlice(7), wantErr: gpu.ErrNotSupported},
		{name: "a lost GPU cannot be set", set: gpu.TimeSliceLong, lose: true, wantErr: gpu.ErrGPULost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newTestBackend(t, "dgxh100")
			if tt.lose {
				if err := b.LoseGPU(1); err != nil {
					t.Fatal(err)
				}
			}
			err := b.SetTimeSlice(ctx, 1, tt.set)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("SetTimeSlice = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.reset {
				if err := b.ResetGPU(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			got, err := b.TimeSlice(ctx, 1)
			if err != nil || got != tt.want {
				t.Errorf("TimeSlice = %v, %v; want %v", got, err, tt.want)
			}
			if other, _ := b.TimeSlice(ctx, 0); other != gpu.TimeSliceDefault {
				t.Errorf("GPU 0's time slice = %v; setting GPU 1 must not touch it", other)
			}
		})
	}
}
