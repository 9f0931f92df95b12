package nvml

import (
	"context"
	"fmt"
	"math"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Sample implements gpu.Telemetry. A reading the GPU does not offer
// (NOT_SUPPORTED) is left zero and counted in MissingFieldsCount; a lost GPU
// fails the whole sample with gpu.ErrGPULost.
func (b *Backend) Sample(_ context.Context, index int, s *gpu.Sample) error {
	h, err := b.handle(index)
	if err != nil {
		return err
	}
	*s = gpu.Sample{Timestamp: time.Now()}
	var failed error
	// check records a reading's outcome and reports whether to use it.
	check := func(what string, ret gonvml.Return) bool {
		switch ret {
		case gonvml.SUCCESS:
			return true
		case gonvml.ERROR_GPU_IS_LOST:
			if failed == nil {
				failed = retError(fmt.Sprintf("gpu %d: reading %s", index, what), ret)
			}
		default:
			s.MissingFieldsCount++
		}
		return false
	}
	if u, ret := h.GetUtilizationRates(); check("utilization", ret) {
		s.GPUUtil, s.MemCopyUtil = u.Gpu, u.Memory
	}
	if m, ret := h.GetMemoryInfo_v2(); check("memory", ret) {
		s.FBUsedMiB, s.FBFreeMiB, s.FBReservedMiB = m.Used>>20, m.Free>>20, m.Reserved>>20
	} else if m, ret := h.GetMemoryInfo(); ret == gonvml.SUCCESS {
		s.MissingFieldsCount--
		s.FBUsedMiB, s.FBFreeMiB = m.Used>>20, m.Free>>20
	}
	if t, ret := h.GetTemperature(gonvml.TEMPERATURE_GPU); check("temperature", ret) {
		s.GPUTempC = t
	}
	// The field buffer is reused across samples; the lock keeps two
	// concurrent samples of one GPU from sharing it.
	b.mu.Lock()
	fields := b.fields[index]
	resetFields(fields)
	ret := h.GetFieldValues(fields)
	var got [numFields]uint64
	var ok [numFields]bool
	for i := range fields {
		got[i], ok[i] = fieldUint(fields[i]), fields[i].NvmlReturn == uint32(gonvml.SUCCESS)
	}
	b.mu.Unlock()
	if check("memory temperature", ret) && ok[fieldMemTemp] {
		s.MemoryTempC = uint32(got[fieldMemTemp])
	}
	switch {
	case ret == gonvml.ERROR_GPU_IS_LOST:
	case ret != gonvml.SUCCESS:
		s.Unsupported |= gpu.ReadNVLink
		s.MissingFieldsCount++
	case ok[fieldLinkCount] && got[fieldLinkCount] == 0, !ok[fieldNVLinkTx] || !ok[fieldNVLinkRx]:
		// No NVLink, or a driver without its throughput counters.
		s.Unsupported |= gpu.ReadNVLink
		s.MissingFieldsCount++
	default:
		s.NVLinkKiB = got[fieldNVLinkTx] + got[fieldNVLinkRx]
		s.Has |= gpu.ReadNVLink
	}
	if u, _, ret := h.GetEncoderUtilization(); check("encoder utilization", ret) {
		s.EncoderUtil, s.Has = u, s.Has|gpu.ReadEncoderUtil
	} else if ret != gonvml.ERROR_GPU_IS_LOST {
		s.Unsupported |= gpu.ReadEncoderUtil
	}
	if u, _, ret := h.GetDecoderUtilization(); check("decoder utilization", ret) {
		s.DecoderUtil, s.Has = u, s.Has|gpu.ReadDecoderUtil
	} else if ret != gonvml.ERROR_GPU_IS_LOST {
		s.Unsupported |= gpu.ReadDecoderUtil
	}
	b.vgpuLicense(h, s)
	if failed == nil {
		b.profiling(index, h, s)
	}
	if p, ret := h.GetPowerUsage(); check("power", ret) {
		s.PowerMilliW = p
	}
	if e, ret := h.GetTotalEnergyConsumption(); check("energy", ret) {
		s.EnergyMilliJ = e
	}
	if c, ret := h.GetClockInfo(gonvml.CLOCK_SM); check("SM clock", ret) {
		s.SMClockMHz = c
	}
	if c, ret := h.GetClockInfo(gonvml.CLOCK_MEM); check("memory clock", ret) {
		s.MemClockMHz = c
	}
	if r, ret := h.GetPcieReplayCounter(); check("PCIe replays", ret) {
		s.PCIeReplayCounter = uint64(r)
	}
	if v, ret := h.GetTotalEccErrors(gonvml.MEMORY_ERROR_TYPE_CORRECTED, gonvml.VOLATILE_ECC); check("ECC", ret) {
		s.ECC.VolatileSingleBit = v
	}
	if v, ret := h.GetTotalEccErrors(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.VOLATILE_ECC); check("ECC", ret) {
		s.ECC.VolatileDoubleBit = v
	}
	if v, ret := h.GetTotalEccErrors(gonvml.MEMORY_ERROR_TYPE_CORRECTED, gonvml.AGGREGATE_ECC); check("ECC", ret) {
		s.ECC.AggregateSingleBit = v
	}
	if v, ret := h.GetTotalEccErrors(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.AGGREGATE_ECC); check("ECC", ret) {
		s.ECC.AggregateDoubleBit = v
	}
	if corr, unc, pending, failure, ret := h.GetRemappedRows(); check("remapped rows", ret) {
		s.RemappedRows = gpu.RemappedRows{Correctable: uint64(corr), Uncorrectable: uint64(unc), Pending: pending, Failure: failure}
	}
	return failed
}

// The field values each Sample asks for, by their place in the buffer.
const (
	fieldMemTemp = iota
	fieldLinkCount
	fieldNVLinkTx
	fieldNVLinkRx
	numFields
)

// allLinks as a field's scope asks for the sum over all NVLinks.
const allLinks = math.MaxUint32

// resetFields readies the field buffer for a call: NVML writes the values
// and return codes over the previous ones.
func resetFields(f []gonvml.FieldValue) {
	f[fieldMemTemp] = gonvml.FieldValue{FieldId: gonvml.FI_DEV_MEMORY_TEMP}
	f[fieldLinkCount] = gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_LINK_COUNT}
	// The data throughput counters count payload only, in KiB.
	f[fieldNVLinkTx] = gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: allLinks}
	f[fieldNVLinkRx] = gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: allLinks}
}

// vgpuLicense reads whether a vGPU holds a license. On bare metal and in
// passthrough the reading does not apply and is left out.
func (b *Backend) vgpuLicense(h gonvml.Device, s *gpu.Sample) {
	mode, ret := h.GetVirtualizationMode()
	if ret != gonvml.SUCCESS || mode != gonvml.GPU_VIRTUALIZATION_MODE_VGPU {
		return
	}
	feats, ret := h.GetGridLicensableFeatures()
	if ret != gonvml.SUCCESS {
		s.MissingFieldsCount++
		return
	}
	s.Has |= gpu.ReadVGPULicense
	n := min(int(feats.LicensableFeaturesCount), len(feats.GridLicensableFeatures))
	for _, f := range feats.GridLicensableFeatures[:n] {
		if f.FeatureState != 0 {
			s.VGPULicensed = true
		}
	}
}

// fieldUint reads a field value NVML returned as one of its integer types.
func fieldUint(f gonvml.FieldValue) uint64 {
	v := f.Value
	switch gonvml.ValueType(f.ValueType) {
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24)
	default:
		var u uint64
		for i := 7; i >= 0; i-- {
			u = u<<8 | uint64(v[i])
		}
		return u
	}
}

// Processes implements gpu.Telemetry: the GPU's compute processes with
// their memory and, where the driver keeps samples, their utilization.
func (b *Backend) Processes(_ context.Context, index int, buf []gpu.Process) ([]gpu.Process, error) {
	h, err := b.handle(index)
	if err != nil {
		return buf, err
	}
	procs, ret := h.GetComputeRunningProcesses()
	if ret != gonvml.SUCCESS {
		return buf, retError(fmt.Sprintf("gpu %d: listing processes", index), ret)
	}
	b.mu.Lock()
	since := b.procTS[index]
	b.mu.Unlock()
	util := map[uint32]gonvml.ProcessUtilizationSample{}
	if samples, ret := h.GetProcessUtilization(since); ret == gonvml.SUCCESS {
		newest := since
		for _, s := range samples {
			util[s.Pid] = s
			newest = max(newest, s.TimeStamp)
		}
		b.mu.Lock()
		b.procTS[index] = newest
		b.mu.Unlock()
	}
	for _, p := range procs {
		gp := gpu.Process{PID: p.Pid, UsedMemMiB: p.UsedGpuMemory >> 20, GPUInstanceID: -1, ComputeInstanceID: -1}
		if p.GpuInstanceId != noInstance {
			gp.GPUInstanceID, gp.ComputeInstanceID = int(p.GpuInstanceId), int(p.ComputeInstanceId)
		}
		if u, ok := util[p.Pid]; ok {
			gp.SMUtil, gp.MemUtil = u.SmUtil, u.MemUtil
		}
		buf = append(buf, gp)
	}
	return buf, nil
}
