package deviceplugin

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// Container contract.
const (
	// EnvVisibleDevices lists the devices for the NVIDIA container runtime.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// VolumeMountDir is where volume-mounts puts one empty mount per
	// device; NVIDIA_VISIBLE_DEVICES then points at it.
	VolumeMountDir = "/var/run/nvidia-container-devices"
	// EnvMPSPipeDirectory and the others configure MPS clients.
	EnvMPSPipeDirectory       = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSPinnedMemLimit      = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSActiveThreadPercent = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// EnvGPUFraction and EnvGPUMemoryLimit tell a container the part of a
	// GPU its pod asked for ("0.25", MiB), on every kind of sharing.
	EnvGPUFraction             = "GPUPLANE_GPU_FRACTION"
	EnvGPUMemoryLimit          = "GPUPLANE_GPU_MEMORY_LIMIT_MIB"
	cdiAnnotationPluginName    = "gpuplane"
	controlDeviceNodePermision = "rw"
)

// controlDevices are passed with passDeviceSpecs besides each GPU's node.
var controlDevices = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// Contract is how Allocate describes devices to the container runtime.
type Contract struct {
	ListStrategies      []string
	IDStrategy          string
	PassDeviceSpecs     bool
	DevRoot             string
	CDIAnnotationPrefix string
	MPSRoot             string
}

// ContractFromConfig takes the contract from a loaded config.
func ContractFromConfig(c *configv1.Config) Contract {
	devRoot := c.DriverRoot()
	if c.Flags.NvidiaDevRoot != nil {
		devRoot = *c.Flags.NvidiaDevRoot
	}
	return Contract{
		ListStrategies:      c.DeviceListStrategies(),
		IDStrategy:          c.DeviceIDStrategy(),
		PassDeviceSpecs:     c.PassDeviceSpecs(),
		DevRoot:             devRoot,
		CDIAnnotationPrefix: c.CDIAnnotationPrefix(),
		MPSRoot:             c.MPSRoot(),
	}
}

// containerResponse builds the answer for one container's devices, which
// the caller has checked exist.
func (c *Contract) containerResponse(r *sharing.Resource, devs []*sharing.Device) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	// Replicas of one GPU are one device to the runtime.
	var names, qualified []string
	var units []*sharing.Device
	for _, d := range devs {
		name := cdi.DeviceName(d, c.IDStrategy)
		if slices.Contains(names, name) {
			continue
		}
		names = append(names, name)
		qualified = append(qualified, cdi.QualifiedName(r, d, c.IDStrategy))
		units = append(units, d)
	}
	for _, s := range c.ListStrategies {
		switch s {
		case configv1.DeviceListStrategyEnvVar:
			resp.Envs[EnvVisibleDevices] = strings.Join(names, ",")
		case configv1.DeviceListStrategyVolumeMounts:
			resp.Envs[EnvVisibleDevices] = VolumeMountDir
			for _, n := range names {
				resp.Mounts = append(resp.Mounts, &pluginapi.Mount{
					ContainerPath: filepath.Join(VolumeMountDir, n), HostPath: "/dev/null",
				})
			}
		case configv1.DeviceListStrategyCDIAnnotations:
			key := c.CDIAnnotationPrefix + cdiAnnotationPluginName + "_" + annotationSafe(r.ShortName())
			if resp.Annotations == nil {
				resp.Annotations = map[string]string{}
			}
			resp.Annotations[key] = strings.Join(qualified, ",")
		case configv1.DeviceListStrategyCDICRI:
			for _, q := range qualified {
				resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: q})
			}
		default:
			return nil, fmt.Errorf("unknown device list strategy %q", s)
		}
	}
	if c.PassDeviceSpecs {
		paths := slices.Clone(controlDevices)
		for _, d := range units {
			for _, p := range d.Paths {
				if !slices.Contains(paths, p) {
					paths = append(paths, p)
				}
			}
		}
		for _, p := range paths {
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{
				ContainerPath: p, HostPath: filepath.Join(c.DevRoot, p), Permissions: controlDeviceNodePermision,
			})
		}
	}
	if len(units) > 0 && units[0].Sharing == sharing.SharingMPS {
		pipe := cdi.MPSPipeDir(c.MPSRoot, r)
		resp.Envs[EnvMPSPipeDirectory] = pipe
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: pipe, HostPath: pipe})
		var limits []string
		for i, d := range units {
			limits = append(limits, strconv.Itoa(i)+"="+strconv.FormatUint(d.MPSMemoryLimitMiB(), 10)+"M")
		}
		resp.Envs[EnvMPSPinnedMemLimit] = strings.Join(limits, ",")
		resp.Envs[EnvMPSActiveThreadPercent] = strconv.Itoa(units[0].MPSActiveThreadPercentage())
	}
	if len(resp.Envs) == 0 {
		resp.Envs = nil
	}
	return resp, nil
}

// annotationSafe keeps characters valid in a CDI annotation key.
func annotationSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

// fractionEnv adds the limits of the part of a GPU a pod asked for to a
// container's environment: always as GPUPLANE_GPU_FRACTION and
// GPUPLANE_GPU_MEMORY_LIMIT_MIB, and on MPS as the client's active-thread
// percentage and pinned memory limit in place of the replica's even share,
// which MPS enforces. Time-slicing cannot enforce them.
func fractionEnv(env map[string]string, devs []*sharing.Device, milli, memoryMiB int64) map[string]string {
	if milli <= 0 && memoryMiB <= 0 {
		return env
	}
	if env == nil {
		env = map[string]string{}
	}
	mps := len(devs) > 0 && devs[0].Sharing == sharing.SharingMPS
	if milli > 0 {
		env[EnvGPUFraction] = strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
		if mps {
			env[EnvMPSActiveThreadPercent] = strconv.FormatInt(max((milli+9)/10, 1), 10)
		}
	}
	if memoryMiB > 0 {
		env[EnvGPUMemoryLimit] = strconv.FormatInt(memoryMiB, 10)
		if mps {
			limits := make([]string, len(devs))
			for i, d := range devs {
				limits[i] = strconv.Itoa(i) + "=" + strconv.FormatUint(min(uint64(memoryMiB), d.MemoryMiB), 10) + "M"
			}
			env[EnvMPSPinnedMemLimit] = strings.Join(limits, ",")
		}
	}
	return env
}
