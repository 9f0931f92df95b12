package sim

import (
	"context"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

var _ gpu.TimeSlicer = (*Backend)(nil)

// SetTimeSlice implements gpu.TimeSlicer: the GPU keeps the time slice
// until it is set again or the GPU is reset (a reset restores the
// default, as the driver's compute policy does). A fault injected with
// FailCall(OpSetTimeSlice, index, err) refuses it.
func (b *Backend) SetTimeSlice(_ context.Context, index int, t gpu.TimeSlice) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.gpuLocked(OpSetTimeSlice, index)
	if err != nil {
		return err
	}
	if !t.Valid() {
		return fmt.Errorf("gpu %d (%s): %s: %v is not a time slice: %w", index, g.uuid, OpSetTimeSlice.doing(), t, gpu.ErrNotSupported)
	}
	g.timeSlice = t
	return nil
}

// TimeSlice implements gpu.TimeSlicer.
func (b *Backend) TimeSlice(_ context.Context, index int) (gpu.TimeSlice, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.gpuLocked(OpSetTimeSlice, index)
	if err != nil {
		return 0, err
	}
	return g.timeSlice, nil
}
