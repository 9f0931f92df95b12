package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Label names, as dcgm-exporter writes them.
const (
	LabelGPU       = "gpu"
	LabelUUID      = "UUID"
	LabelPCIBusID  = "pci_bus_id"
	LabelDevice    = "device"
	LabelModelName = "modelName"
	LabelHostname  = "Hostname"
	LabelGIProfile = "GPU_I_PROFILE"
	LabelGIID      = "GPU_I_ID"
	// LabelDriverVersion carries the driver version on every DCGM_FI_*
	// series, as dcgm-exporter's default DCGM_FI_DRIVER_VERSION label
	// field does.
	LabelDriverVersion = "DCGM_FI_DRIVER_VERSION"
	LabelPod           = "pod"
	LabelNamespace     = "namespace"
	LabelContainer     = "container"
	labelReason        = "reason"
	labelCollector     = "collector"
	labelResource      = "resource"
	reasonGPULost      = "gpu-lost"
	reasonReadError    = "read-error"
)

var (
	deviceLabels = []string{LabelGPU, LabelUUID, LabelPCIBusID, LabelDevice, LabelModelName, LabelHostname}
	podLabels    = []string{LabelContainer, LabelNamespace, LabelPod}
)

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// field is one dcgm-exporter GPU field read from a gpu.Sample.
type field struct {
	name, help string
	typ        prometheus.ValueType
	value      func(s *gpu.Sample) float64
	// skipZero leaves the series out when the value is zero, for readings
	// a GPU may not have (memory temperature without HBM).
	skipZero bool
	// need leaves the series out of a sample that lacks the reading.
	need gpu.Readings
	// own marks gpuplane's own series: they carry no driver version label.
	own  bool
	desc *prometheus.Desc
}

// profField is one profiling series, of a whole GPU or of a MIG GPU
// instance.
type profField struct {
	name, help string
	need       gpu.Readings
	value      func(p *gpu.Profiling) float64
	// migDesc is the series with the MIG labels.
	migDesc *prometheus.Desc
}

// profNote ends the help of the profiling series.
const profNote = " Needs NVML GPM (Hopper or later); absent on older GPUs and in the first scrape."

// profFields are dcgm-exporter's default profiling (DCP) series.
func profFields() []profField {
	return []profField{
		{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", help: "Ratio of time the graphics engine is active." + profNote, need: gpu.ReadGREngineActive,
			value: func(p *gpu.Profiling) float64 { return p.GREngineActive }},
		{name: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", help: "Ratio of cycles the tensor (HMMA) pipe is active." + profNote, need: gpu.ReadTensorActive,
			value: func(p *gpu.Profiling) float64 { return p.TensorActive }},
		{name: "DCGM_FI_PROF_DRAM_ACTIVE", help: "Ratio of cycles the device memory interface is active sending or receiving data." + profNote, need: gpu.ReadDRAMActive,
			value: func(p *gpu.Profiling) float64 { return p.DRAMActive }},
		{name: "DCGM_FI_PROF_PCIE_TX_BYTES", help: "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second." + profNote, need: gpu.ReadPCIeTx,
			value: func(p *gpu.Profiling) float64 { return p.PCIeTxBytesPerSec }},
		{name: "DCGM_FI_PROF_PCIE_RX_BYTES", help: "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second." + profNote, need: gpu.ReadPCIeRx,
			value: func(p *gpu.Profiling) float64 { return p.PCIeRxBytesPerSec }},
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// deviceFields are the GPU-wide series, in dcgm-exporter's names and units.
func deviceFields() []field {
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	return []field{
		{name: "DCGM_FI_DEV_SM_CLOCK", help: "SM clock frequency (in MHz).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.SMClockMHz) }},
		{name: "DCGM_FI_DEV_MEM_CLOCK", help: "Memory clock frequency (in MHz).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.MemClockMHz) }},
		{name: "DCGM_FI_DEV_GPU_TEMP", help: "GPU temperature (in C).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.GPUTempC) }},
		{name: "DCGM_FI_DEV_MEMORY_TEMP", help: "Memory temperature (in C).", typ: g, skipZero: true, value: func(s *gpu.Sample) float64 { return float64(s.MemoryTempC) }},
		{name: "DCGM_FI_DEV_POWER_USAGE", help: "Power draw (in W).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.PowerMilliW) / 1000 }},
		{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", help: "Total energy consumption since the driver loaded (in mJ).", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.EnergyMilliJ) }},
		{name: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", help: "Total number of PCIe retries.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.PCIeReplayCounter) }},
		{name: "DCGM_FI_DEV_GPU_UTIL", help: "GPU utilization (in %).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.GPUUtil) }},
		{name: "DCGM_FI_DEV_MEM_COPY_UTIL", help: "Memory bandwidth utilization (in %).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.MemCopyUtil) }},
		{name: "DCGM_FI_DEV_FB_FREE", help: "Framebuffer memory free (in MiB).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.FBFreeMiB) }},
		{name: "DCGM_FI_DEV_FB_USED", help: "Framebuffer memory used (in MiB).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.FBUsedMiB) }},
		{name: "DCGM_FI_DEV_FB_RESERVED", help: "Framebuffer memory reserved by the driver (in MiB).", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.FBReservedMiB) }},
		{name: "DCGM_FI_DEV_XID_ERRORS", help: "Value of the last XID error encountered.", typ: g, value: func(s *gpu.Sample) float64 { return float64(s.LastXID) }},
		{name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", help: "Total number of single-bit volatile ECC errors.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.ECC.VolatileSingleBit) }},
		{name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", help: "Total number of double-bit volatile ECC errors.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.ECC.VolatileDoubleBit) }},
		{name: "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", help: "Total number of single-bit persistent ECC errors.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.ECC.AggregateSingleBit) }},
		{name: "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", help: "Total number of double-bit persistent ECC errors.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.ECC.AggregateDoubleBit) }},
		{name: "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", help: "Number of remapped rows for correctable errors.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.RemappedRows.Correctable) }},
		{name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", help: "Number of remapped rows for uncorrectable errors.", typ: c, value: func(s *gpu.Sample) float64 { return float64(s.RemappedRows.Uncorrectable) }},
		{name: "DCGM_FI_DEV_ROW_REMAP_FAILURE", help: "Whether remapping of rows has failed (1) or not (0).", typ: g, value: func(s *gpu.Sample) float64 { return b2f(s.RemappedRows.Failure) }},
		{name: "DCGM_FI_DEV_ROW_REMAP_PENDING", help: "Whether a row remapping waits for a GPU reset (1) or not (0).", typ: g, value: func(s *gpu.Sample) float64 { return b2f(s.RemappedRows.Pending) }},
		{name: "DCGM_FI_DEV_ENC_UTIL", help: "Encoder utilization (in %).", typ: g, need: gpu.ReadEncoderUtil, value: func(s *gpu.Sample) float64 { return float64(s.EncoderUtil) }},
		{name: "DCGM_FI_DEV_DEC_UTIL", help: "Decoder utilization (in %).", typ: g, need: gpu.ReadDecoderUtil, value: func(s *gpu.Sample) float64 { return float64(s.DecoderUtil) }},
		{name: "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", typ: c, need: gpu.ReadNVLink, value: func(s *gpu.Sample) float64 { return float64(s.NVLinkKiB) },
			help: "Total NVLink data (payload, without protocol headers) sent and received over all links since the driver loaded (in KiB); rate() gives KiB/s. Absent on GPUs without NVLink."},
		{name: "DCGM_FI_DEV_VGPU_LICENSE_STATUS", typ: g, need: gpu.ReadVGPULicense, value: func(s *gpu.Sample) float64 { return b2f(s.VGPULicensed) },
			help: "vGPU License status: licensed (1) or not (0). Only on vGPUs (a GPU seen from inside a VM); absent on bare metal and in passthrough."},
		{name: "gpuplane_xid_errors_total", help: "XID errors the GPU reported since the agent started watching it.", typ: c, own: true, value: func(s *gpu.Sample) float64 { return float64(s.XIDCount) }},
	}
}

// allDeviceFields are deviceFields followed by the whole-GPU profiling
// series.
func allDeviceFields(prof []profField) []field {
	out := deviceFields()
	for i := range prof {
		pf := &prof[i]
		out = append(out, field{name: pf.name, help: pf.help, typ: prometheus.GaugeValue, need: pf.need,
			value: func(s *gpu.Sample) float64 { return pf.value(&s.Profiling) }})
	}
	return out
}

// descs holds every Desc the Exporter emits, built once.
type descs struct {
	// devPod and mig are the label names of the device and MIG series, in
	// the order labelValues gives their values.
	devPod, mig []string
	// dcgm and dcgmMIG are the same with the driver version, for the
	// DCGM_FI_* series.
	dcgm, dcgmMIG []string
	fields        []field
	prof          []profField
	// MIG devices: framebuffer used and free of the GPU instance.
	migFBUsed, migFBFree *prometheus.Desc

	telemetryUp *prometheus.Desc

	podUtil, podMem, podProcs, migPodUtil, migPodMem, migPodProcs *prometheus.Desc
	allocations, unmapped, podResourcesUp, checkpointUp           *prometheus.Desc
	// containerShare and idleShare say how much of a physical GPU each
	// container holds, and how much of each GPU nobody holds.
	containerShare, idleShare *prometheus.Desc
	// queueInfo names the Queue of each pod with a GPU share.
	queueInfo *prometheus.Desc
	// podMemLimit is the GPU memory a pod that asked for part of a GPU
	// may use.
	podMemLimit *prometheus.Desc
	// foreign counts processes of pods on GPUs they were not given.
	foreign *prometheus.Desc

	healthy, monitorUp, unmonitored *prometheus.Desc

	scrapeDuration, collectorDuration, collectorSuccess *prometheus.Desc
}

func newDescs() *descs {
	devPod := join(deviceLabels, podLabels)
	mig := join(deviceLabels, []string{LabelGIProfile, LabelGIID}, podLabels)
	dcgm := join(deviceLabels, []string{LabelDriverVersion}, podLabels)
	dcgmMIG := join(deviceLabels, []string{LabelGIProfile, LabelGIID, LabelDriverVersion}, podLabels)
	d := &descs{devPod: devPod, mig: mig, dcgm: dcgm, dcgmMIG: dcgmMIG, prof: profFields()}
	d.fields = allDeviceFields(d.prof)
	for i := range d.fields {
		f := &d.fields[i]
		labels := dcgm
		if f.own {
			labels = devPod
		}
		f.desc = prometheus.NewDesc(f.name, f.help, labels, nil)
	}
	for i := range d.prof {
		pf := &d.prof[i]
		pf.migDesc = prometheus.NewDesc(pf.name, pf.help, dcgmMIG, nil)
	}
	d.migFBUsed = prometheus.NewDesc("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", dcgmMIG, nil)
	d.migFBFree = prometheus.NewDesc("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", dcgmMIG, nil)
	d.telemetryUp = prometheus.NewDesc("gpuplane_device_telemetry_up",
		"Whether the GPU answered this scrape (1) or not (0, the reason says why); a GPU that does not answer has no DCGM_* series.",
		join(deviceLabels, []string{labelReason}), nil)

	podHelp := " of the pod's processes on the GPU; on a shared GPU each pod gets its own share."
	d.podUtil = prometheus.NewDesc("gpuplane_pod_gpu_utilization_ratio", "SM utilization (0 to 1)"+podHelp, devPod, nil)
	d.podMem = prometheus.NewDesc("gpuplane_pod_gpu_memory_used_bytes", "Framebuffer memory used"+podHelp, devPod, nil)
	d.podProcs = prometheus.NewDesc("gpuplane_pod_gpu_processes", "Number of processes"+podHelp, devPod, nil)
	d.podMemLimit = prometheus.NewDesc("gpuplane_pod_gpu_memory_limit_bytes",
		"GPU memory the pod asked for when it asked for part of a GPU; on time-sliced GPUs nothing enforces it, so compare gpuplane_pod_gpu_memory_used_bytes.", devPod, nil)
	d.foreign = prometheus.NewDesc("gpuplane_gpu_unallocated_pod_processes",
		"Processes of a pod (pod_uid) running on a GPU none of its containers was given (given to no container, or to another pod): a pod reaching past the device plugin, e.g. privileged or with NVIDIA_VISIBLE_DEVICES=all.",
		join(deviceLabels, []string{"pod_uid"}), nil)
	d.migPodUtil = prometheus.NewDesc("gpuplane_pod_gpu_utilization_ratio", "SM utilization (0 to 1)"+podHelp, mig, nil)
	d.migPodMem = prometheus.NewDesc("gpuplane_pod_gpu_memory_used_bytes", "Framebuffer memory used"+podHelp, mig, nil)
	d.migPodProcs = prometheus.NewDesc("gpuplane_pod_gpu_processes", "Number of processes"+podHelp, mig, nil)
	d.allocations = prometheus.NewDesc("gpuplane_device_allocations",
		"Number of containers holding the GPU (or one of its MIG devices or replicas), by resource name.",
		join(deviceLabels, []string{labelResource}), nil)
	d.containerShare = prometheus.NewDesc("container_gpu_allocation",
		"Physical GPUs the container holds: 1 per whole GPU, a MIG device's slices over its GPU's, 1/replicas per shared replica (the name OpenCost reads).",
		[]string{"namespace", "pod", "container", "node"}, nil)
	d.queueInfo = prometheus.NewDesc("gpuplane_pod_queue_info",
		"Always 1: the Queue whose quota the pod's GPUs count against, as gpuplane-scheduler recorded it when it bound the pod (annotation gpuplane.io/queue); join it to container_gpu_allocation on namespace and pod to sum GPU time per queue.",
		[]string{"namespace", "pod", "queue"}, nil)
	d.idleShare = prometheus.NewDesc("gpuplane_gpu_idle_share",
		"Part of the GPU (0 to 1) no container holds: its free MIG slices or replicas, or all of it.", deviceLabels, nil)
	d.unmapped = prometheus.NewDesc("gpuplane_pod_attribution_unmapped_processes",
		"Processes on a GPU shared by several pods that could not be mapped to one of them.", deviceLabels, nil)
	d.podResourcesUp = prometheus.NewDesc("gpuplane_podresources_up",
		"Whether the kubelet's PodResources API answered this scrape (1) or not (0, the reason says why); without it series carry no pod labels.",
		[]string{labelReason}, nil)
	d.checkpointUp = prometheus.NewDesc("gpuplane_kubelet_checkpoint_up",
		"Whether the kubelet's device checkpoint could be read (1) or not (0, the reason says why); without it shared GPUs are not split between pods.",
		[]string{labelReason}, nil)

	d.healthy = prometheus.NewDesc("gpuplane_device_healthy",
		"Whether the health monitor considers the GPU healthy (1) or not (0, the reason says why).",
		join(deviceLabels, []string{labelReason}), nil)
	d.monitorUp = prometheus.NewDesc("gpuplane_health_monitor_up",
		"Whether the health monitor is watching GPU events (1) or not (0, the reason says why).", []string{labelReason}, nil)
	d.unmonitored = prometheus.NewDesc("gpuplane_health_monitor_unmonitored_devices",
		"Number of GPUs whose events cannot be watched.", nil, nil)

	d.scrapeDuration = prometheus.NewDesc("gpuplane_scrape_duration_seconds", "Time the last scrape took to collect.", nil, nil)
	d.collectorDuration = prometheus.NewDesc("gpuplane_scrape_collector_duration_seconds", "Time each collector took in the last scrape.", []string{labelCollector}, nil)
	d.collectorSuccess = prometheus.NewDesc("gpuplane_scrape_collector_success", "Whether each collector succeeded in the last scrape (1) or not (0).", []string{labelCollector}, nil)
	return d
}
