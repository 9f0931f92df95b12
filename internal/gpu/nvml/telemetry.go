package nvml

import (
	"context"
	"fmt"
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
	ret := h.GetFieldValues(fields)
	memTemp, memTempOK := fieldUint(fields[0]), fields[0].NvmlReturn == uint32(gonvml.SUCCESS)
	b.mu.Unlock()
	if check("memory temperature", ret) && memTempOK {
		s.MemoryTempC = uint32(memTemp)
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
