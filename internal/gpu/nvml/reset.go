package nvml

import (
	"context"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

var _ gpu.Resetter = (*Backend)(nil)

// ResetGPU implements gpu.Resetter. NVML's public API has no call that
// resets a GPU in place (nvmlDeviceResetGpuLockedClocks only unlocks
// clocks; nvidia-smi --gpu-reset uses the driver's private interface), and
// its hot-unplug path (nvmlDeviceRemoveGpu, nvmlDeviceDiscoverGpus)
// invalidates every handle this backend holds. So it reports
// gpu.ErrNotSupported with how to reset the GPU by hand; the quarantine
// then keeps the GPU out of service until it passes revalidation.
func (b *Backend) ResetGPU(_ context.Context, index int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	if index < 0 || index >= len(b.handles) {
		return fmt.Errorf("resetting GPU: gpu %d: %w (node has %d GPUs)", index, gpu.ErrNotFound, len(b.handles))
	}
	return fmt.Errorf("resetting GPU %d: NVML offers no reset call; run `nvidia-smi --gpu-reset -i %d` on the node once no process uses it (or reboot the node): %w",
		index, index, gpu.ErrNotSupported)
}
