package nvml

import (
	"context"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

const noInstance = 0xFFFFFFFF

// migDevices lists the MIG devices of a GPU whose MIG mode is on.
func (b *Backend) migDevices(h gonvml.Device, parent *gpu.Device) ([]gpu.MIGDevice, error) {
	count, ret := h.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return nil, retError(fmt.Sprintf("gpu %d: counting MIG devices", parent.Index), ret)
	}
	var out []gpu.MIGDevice
	for i := range count {
		m, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != gonvml.SUCCESS {
			return nil, retError(fmt.Sprintf("gpu %d: reading MIG device %d", parent.Index, i), ret)
		}
		md, err := migDevice(h, m, parent)
		if err != nil {
			return nil, err
		}
		out = append(out, md)
	}
	return out, nil
}

func migDevice(parentHandle, m gonvml.Device, parent *gpu.Device) (gpu.MIGDevice, error) {
	md := gpu.MIGDevice{ParentIndex: parent.Index, ParentUUID: parent.UUID}
	fail := func(what string, ret gonvml.Return) (gpu.MIGDevice, error) {
		return md, retError(fmt.Sprintf("gpu %d: reading MIG device %s", parent.Index, what), ret)
	}
	var ret gonvml.Return
	if md.UUID, ret = m.GetUUID(); ret != gonvml.SUCCESS {
		return fail("UUID", ret)
	}
	if md.GPUInstanceID, ret = m.GetGpuInstanceId(); ret != gonvml.SUCCESS {
		return fail("GPU instance ID", ret)
	}
	if md.ComputeInstanceID, ret = m.GetComputeInstanceId(); ret != gonvml.SUCCESS {
		return fail("compute instance ID", ret)
	}
	attr, ret := m.GetAttributes()
	if ret != gonvml.SUCCESS {
		return fail("attributes", ret)
	}
	md.MemoryMiB = attr.MemorySizeMB
	md.MultiprocessorCount = int(attr.MultiprocessorCount)
	md.GPUSlices = int(attr.GpuInstanceSliceCount)
	md.ComputeSlices = int(attr.ComputeInstanceSliceCount)
	md.Engines = gpu.Engines{
		Copy: int(attr.SharedCopyEngineCount), Decoder: int(attr.SharedDecoderCount),
		Encoder: int(attr.SharedEncoderCount), JPEG: int(attr.SharedJpegCount), OFA: int(attr.SharedOfaCount),
	}
	gi, ret := parentHandle.GetGpuInstanceById(md.GPUInstanceID)
	if ret != gonvml.SUCCESS {
		return fail("GPU instance", ret)
	}
	info, ret := gi.GetInfo()
	if ret != gonvml.SUCCESS {
		return fail("GPU instance info", ret)
	}
	md.GPUInstanceProfile = int(info.ProfileId)
	md.Placement = gpu.Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)}
	prof, ret := parentHandle.GetGpuInstanceProfileInfo(int(info.ProfileId))
	if ret != gonvml.SUCCESS {
		return fail("GPU instance profile", ret)
	}
	giName := gpu.MIGProfileName(int(prof.Id), int(prof.SliceCount), prof.MemorySizeMB, parent.MemoryMiB)
	md.Profile = gpu.MIGDeviceName(giName, md.GPUSlices, md.ComputeSlices)
	return md, nil
}

// SetMIGMode implements gpu.MIGManager.
func (b *Backend) SetMIGMode(_ context.Context, index int, enabled bool) error {
	h, err := b.handle(index)
	if err != nil {
		return err
	}
	mode := gonvml.DEVICE_MIG_DISABLE
	if enabled {
		mode = gonvml.DEVICE_MIG_ENABLE
	}
	_, ret := h.SetMigMode(mode)
	return retError(fmt.Sprintf("gpu %d: setting MIG mode", index), ret)
}

func (b *Backend) profiles(index int) (gonvml.Device, []gpu.MIGProfile, map[string]gonvml.GpuInstanceProfileInfo, error) {
	h, err := b.handle(index)
	if err != nil {
		return nil, nil, nil, err
	}
	mem, ret := h.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return nil, nil, nil, retError(fmt.Sprintf("gpu %d: reading memory", index), ret)
	}
	totalMiB := mem.Total / (1 << 20)
	var out []gpu.MIGProfile
	byName := map[string]gonvml.GpuInstanceProfileInfo{}
	for id := range gonvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := h.GetGpuInstanceProfileInfo(id)
		if ret != gonvml.SUCCESS {
			continue
		}
		places, ret := h.GetGpuInstancePossiblePlacements(&info)
		if ret != gonvml.SUCCESS {
			return nil, nil, nil, retError(fmt.Sprintf("gpu %d: reading placements of profile %d", index, id), ret)
		}
		p := gpu.MIGProfile{
			Name:                gpu.MIGProfileName(int(info.Id), int(info.SliceCount), info.MemorySizeMB, totalMiB),
			ID:                  int(info.Id),
			SliceCount:          int(info.SliceCount),
			InstanceCount:       int(info.InstanceCount),
			MemoryMiB:           info.MemorySizeMB,
			MultiprocessorCount: int(info.MultiprocessorCount),
			Engines: gpu.Engines{Copy: int(info.CopyEngineCount), Decoder: int(info.DecoderCount),
				Encoder: int(info.EncoderCount), JPEG: int(info.JpegCount), OFA: int(info.OfaCount)},
		}
		for _, pl := range places {
			p.Placements = append(p.Placements, gpu.Placement{Start: int(pl.Start), Size: int(pl.Size)})
		}
		out = append(out, p)
		byName[p.Name] = info
	}
	return h, out, byName, nil
}

// MIGProfiles implements gpu.MIGManager.
func (b *Backend) MIGProfiles(_ context.Context, index int) ([]gpu.MIGProfile, error) {
	_, out, _, err := b.profiles(index)
	return out, err
}

// CreateGPUInstance implements gpu.MIGManager.
func (b *Backend) CreateGPUInstance(_ context.Context, index int, profile string, placement *gpu.Placement) (gpu.GPUInstance, error) {
	h, _, byName, err := b.profiles(index)
	if err != nil {
		return gpu.GPUInstance{}, err
	}
	info, ok := byName[profile]
	if !ok {
		return gpu.GPUInstance{}, fmt.Errorf("gpu %d: MIG profile %q: %w", index, profile, gpu.ErrNotFound)
	}
	var gi gonvml.GpuInstance
	var ret gonvml.Return
	if placement != nil {
		gi, ret = h.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: uint32(placement.Start), Size: uint32(placement.Size)})
	} else {
		gi, ret = h.CreateGpuInstance(&info)
	}
	if ret != gonvml.SUCCESS {
		return gpu.GPUInstance{}, retError(fmt.Sprintf("gpu %d: creating GPU instance %s", index, profile), ret)
	}
	gii, ret := gi.GetInfo()
	if ret != gonvml.SUCCESS {
		return gpu.GPUInstance{}, retError(fmt.Sprintf("gpu %d: reading new GPU instance", index), ret)
	}
	return gpu.GPUInstance{ID: int(gii.Id), Profile: profile, ProfileID: int(info.Id),
		Placement: gpu.Placement{Start: int(gii.Placement.Start), Size: int(gii.Placement.Size)}}, nil
}

func (b *Backend) gpuInstance(index, giID int) (gonvml.GpuInstance, gonvml.GpuInstanceProfileInfo, string, error) {
	h, profs, byName, err := b.profiles(index)
	if err != nil {
		return nil, gonvml.GpuInstanceProfileInfo{}, "", err
	}
	gi, ret := h.GetGpuInstanceById(giID)
	if ret != gonvml.SUCCESS {
		return nil, gonvml.GpuInstanceProfileInfo{}, "", retError(fmt.Sprintf("gpu %d: GPU instance %d", index, giID), ret)
	}
	info, ret := gi.GetInfo()
	if ret != gonvml.SUCCESS {
		return nil, gonvml.GpuInstanceProfileInfo{}, "", retError(fmt.Sprintf("gpu %d: reading GPU instance %d", index, giID), ret)
	}
	for _, p := range profs {
		if p.ID == int(info.ProfileId) {
			return gi, byName[p.Name], p.Name, nil
		}
	}
	return nil, gonvml.GpuInstanceProfileInfo{}, "", fmt.Errorf("gpu %d: GPU instance %d has unknown profile %d: %w", index, giID, info.ProfileId, gpu.ErrNotFound)
}

// CreateComputeInstance implements gpu.MIGManager.
func (b *Backend) CreateComputeInstance(_ context.Context, index, giID int, profile string) (gpu.ComputeInstance, error) {
	gi, giInfo, giName, err := b.gpuInstance(index, giID)
	if err != nil {
		return gpu.ComputeInstance{}, err
	}
	var names []string
	for id := range gonvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		ci, ret := gi.GetComputeInstanceProfileInfo(id, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != gonvml.SUCCESS {
			continue
		}
		name := gpu.MIGDeviceName(giName, int(giInfo.SliceCount), int(ci.SliceCount))
		names = append(names, name)
		if profile != name && (profile != "" || ci.SliceCount != giInfo.SliceCount) {
			continue
		}
		inst, ret := gi.CreateComputeInstance(&ci)
		if ret != gonvml.SUCCESS {
			return gpu.ComputeInstance{}, retError(fmt.Sprintf("gpu %d: creating compute instance %s in GPU instance %d", index, name, giID), ret)
		}
		info, ret := inst.GetInfo()
		if ret != gonvml.SUCCESS {
			return gpu.ComputeInstance{}, retError(fmt.Sprintf("gpu %d: reading new compute instance", index), ret)
		}
		return gpu.ComputeInstance{ID: int(info.Id), GPUInstanceID: giID, Profile: name, ProfileID: int(ci.Id)}, nil
	}
	return gpu.ComputeInstance{}, fmt.Errorf("gpu %d: compute instance profile %q in GPU instance %d (%s): %w (have %v)", index, profile, giID, giName, gpu.ErrNotFound, names)
}

// DestroyComputeInstance implements gpu.MIGManager.
func (b *Backend) DestroyComputeInstance(_ context.Context, index, giID, ciID int) error {
	gi, _, _, err := b.gpuInstance(index, giID)
	if err != nil {
		return err
	}
	ci, ret := gi.GetComputeInstanceById(ciID)
	if ret != gonvml.SUCCESS {
		return retError(fmt.Sprintf("gpu %d: compute instance %d/%d", index, giID, ciID), ret)
	}
	return retError(fmt.Sprintf("gpu %d: destroying compute instance %d/%d", index, giID, ciID), ci.Destroy())
}

// DestroyGPUInstance implements gpu.MIGManager.
func (b *Backend) DestroyGPUInstance(_ context.Context, index, giID int) error {
	gi, _, _, err := b.gpuInstance(index, giID)
	if err != nil {
		return err
	}
	return retError(fmt.Sprintf("gpu %d: destroying GPU instance %d", index, giID), gi.Destroy())
}

// GPUInstances implements gpu.MIGManager.
func (b *Backend) GPUInstances(_ context.Context, index int) ([]gpu.GPUInstance, error) {
	h, profs, byName, err := b.profiles(index)
	if err != nil {
		return nil, err
	}
	var out []gpu.GPUInstance
	for _, p := range profs {
		info := byName[p.Name]
		gis, ret := h.GetGpuInstances(&info)
		if ret != gonvml.SUCCESS {
			return nil, retError(fmt.Sprintf("gpu %d: listing GPU instances of %s", index, p.Name), ret)
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != gonvml.SUCCESS {
				return nil, retError(fmt.Sprintf("gpu %d: reading GPU instance", index), ret)
			}
			out = append(out, gpu.GPUInstance{ID: int(gii.Id), Profile: p.Name, ProfileID: p.ID,
				Placement: gpu.Placement{Start: int(gii.Placement.Start), Size: int(gii.Placement.Size)}})
		}
	}
	return out, nil
}
