package nvml

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

var _ gpu.TimeSlicer = (*Backend)(nil)

// runSMI runs nvidia-smi from $PATH.
func runSMI(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "nvidia-smi", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nvidia-smi %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SetTimeSlice implements gpu.TimeSlicer. NVML sets the compute mode
// (nvmlDeviceSetComputeMode: default, so that several processes share the
// GPU); the time slice itself is a compute policy NVML's public API has no
// call for, so it is set as NVIDIA's own DRA driver does, with
// `nvidia-smi compute-policy --set-timeslice`. A closed backend, an
// unknown or lost GPU and a refused mode fail before nvidia-smi runs.
func (b *Backend) SetTimeSlice(ctx context.Context, index int, t gpu.TimeSlice) error {
	if !t.Valid() {
		return fmt.Errorf("setting the time slice of GPU %d: %v is not a time slice: %w", index, t, gpu.ErrNotSupported)
	}
	h, err := b.handle(index)
	if err != nil {
		return fmt.Errorf("setting the time slice: %w", err)
	}
	if err := retError(fmt.Sprintf("setting GPU %d to the default compute mode", index), h.SetComputeMode(gonvml.COMPUTEMODE_DEFAULT)); err != nil {
		return err
	}
	if err := b.smi(ctx, "compute-policy", "-i", strconv.Itoa(index), "--set-timeslice="+strconv.Itoa(int(t))); err != nil {
		return fmt.Errorf("setting the time slice of GPU %d to %v: %w", index, t, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slices == nil {
		b.slices = map[int]gpu.TimeSlice{}
	}
	b.slices[index] = t
	return nil
}

// TimeSlice implements gpu.TimeSlicer: NVML cannot read the compute
// policy back, so it is the slice this backend last set (the default
// until then).
func (b *Backend) TimeSlice(_ context.Context, index int) (gpu.TimeSlice, error) {
	if _, err := b.handle(index); err != nil {
		return 0, fmt.Errorf("reading the time slice: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slices[index], nil
}
