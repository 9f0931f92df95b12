package nvml

import (
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// retError turns an NVML return code into an error that wraps the matching
// gpu sentinel, so callers can test it with errors.Is.
func retError(op string, ret gonvml.Return) error {
	if ret == gonvml.SUCCESS {
		return nil
	}
	var sentinel error
	switch ret {
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND:
		sentinel = gpu.ErrNotSupported
	case gonvml.ERROR_GPU_IS_LOST:
		sentinel = gpu.ErrGPULost
	case gonvml.ERROR_INSUFFICIENT_RESOURCES:
		sentinel = gpu.ErrInsufficientResources
	case gonvml.ERROR_NOT_FOUND, gonvml.ERROR_INVALID_ARGUMENT:
		sentinel = gpu.ErrNotFound
	case gonvml.ERROR_IN_USE:
		sentinel = gpu.ErrInUse
	}
	if sentinel != nil {
		return fmt.Errorf("%s: %w (%s)", op, sentinel, ret.Error())
	}
	return fmt.Errorf("%s: nvml: %s", op, ret.Error())
}

// InitError is why NVML could not start, with what to do about it.
type InitError struct {
	Return gonvml.Return
	Hint   string
}

func (e *InitError) Error() string {
	return fmt.Sprintf("cannot initialize NVML (%s): %s", e.Return.Error(), e.Hint)
}

// Unwrap lets errors.Is(err, gpu.ErrNoDriver) find a missing driver.
func (e *InitError) Unwrap() error {
	switch e.Return {
	case gonvml.ERROR_LIBRARY_NOT_FOUND, gonvml.ERROR_DRIVER_NOT_LOADED:
		return gpu.ErrNoDriver
	}
	return nil
}

const alternatives = "To run without GPUs, start with --simulate PROFILE; to advertise zero GPUs instead of exiting, set flags.failOnInitError: false"

func initError(ret gonvml.Return, libPath string) error {
	var hint string
	switch ret {
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		hint = fmt.Sprintf("%s was not found. Is the NVIDIA driver installed on this node, and is this container started with the NVIDIA container runtime (runtimeClassName: nvidia, or the NVIDIA Container Toolkit as the default runtime) so the driver's libraries are mounted in? %s.", libPath, alternatives)
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		hint = "the NVIDIA kernel module is not loaded. Check `lsmod | grep nvidia` and the driver installation (dmesg shows why it failed to load). " + alternatives + "."
	case gonvml.ERROR_NO_PERMISSION:
		hint = "no permission to open /dev/nvidiactl or /dev/nvidia*. Run the agent privileged or with access to the NVIDIA device nodes."
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		hint = "the NVML library and the loaded kernel driver are different versions, usually after a driver upgrade without a reboot. Reboot the node or reload the nvidia kernel modules."
	default:
		hint = "check that the NVIDIA driver works on this node (`nvidia-smi`). " + alternatives + "."
	}
	return &InitError{Return: ret, Hint: hint}
}

// IsNoDriver reports whether err says the NVIDIA driver is absent.
func IsNoDriver(err error) bool { return errors.Is(err, gpu.ErrNoDriver) }
