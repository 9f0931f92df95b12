// Package metrics serves a GPU node's Prometheus metrics.
//
// The GPU series use dcgm-exporter's names, units and labels
// (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED in MiB, ... with gpu, UUID,
// pci_bus_id, device, modelName, Hostname, and GPU_I_PROFILE, GPU_I_ID on
// MIG devices), so dashboards and alerts written for dcgm-exporter keep
// working. Every DCGM_FI_* series also carries the driver version as its
// DCGM_FI_DRIVER_VERSION label, which is how dcgm-exporter's default
// counters export that field (there is no series of that name). A GPU held
// by exactly one container carries that container's pod, namespace and
// container labels, as with dcgm-exporter.
//
// dcgm-exporter's default counters that not every GPU offers are left out
// where the GPU lacks them, and the exporter logs once per GPU which ones
// are missing:
//   - DCGM_FI_DEV_ENC_UTIL and DCGM_FI_DEV_DEC_UTIL, percent.
//   - DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, a counter of the NVLink data
//     (payload) sent and received over all links, in KiB; only on GPUs
//     with NVLink. Note that DCGM itself publishes a rate under this name
//     although dcgm-exporter declares it a counter; here it is a true
//     counter, so rate() gives KiB/s.
//   - DCGM_FI_DEV_VGPU_LICENSE_STATUS, 1 when a vGPU is licensed; only
//     inside a VM on a vGPU, absent on bare metal and in passthrough.
//   - DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and
//     DCGM_FI_PROF_DRAM_ACTIVE (ratios 0 to 1), DCGM_FI_PROF_PCIE_TX_BYTES
//     and DCGM_FI_PROF_PCIE_RX_BYTES (bytes per second), read from NVML's
//     GPM on Hopper and later GPUs, for the whole GPU and for each MIG GPU
//     instance (with GPU_I_PROFILE and GPU_I_ID). They compare two readings,
//     so the first scrape after start has none.
//
// A GPU shared by several pods (time-slicing, MPS) does not repeat its
// numbers for each pod. Instead the gpuplane_pod_* series split the GPU's
// utilization and memory between pods by the GPU's processes: each process
// is mapped to its pod through /proc/<pid>/cgroup (pod UID), the kubelet's
// device checkpoint (pod UID to the devices it holds) and the kubelet's
// PodResources API (devices to pod name, namespace and container).
// Allocations are read for every resource name the kubelet reports, so
// renamed .shared resources, ::N replica IDs and MIG devices all map back
// to their GPU.
//
// gpuplane's own series (gpuplane_*) report device health with its reason,
// allocations, the health monitor's state, whether the PodResources API
// answered and why not, and how long each collector took and whether it
// succeeded.
//
// Accounting: container_gpu_allocation (OpenCost's name) is the part of a
// physical GPU each container holds, as Options.ShareOf says (a whole GPU
// 1, a MIG device its slices over its GPU's, a replica 1/replicas, a pod
// that asked for part of a GPU the part it was given);
// gpuplane_gpu_idle_share the part of each GPU nobody holds; and
// gpuplane_pod_queue_info the Queue gpuplane-scheduler recorded on each
// pod, so that `gpuplane cost` can sum GPU-hours per queue.
//
// One scrape reads every GPU once, sequentially, into buffers the Exporter
// keeps between scrapes; it starts no goroutines. A GPU that fails during
// a scrape (for instance because it fell off the bus) loses its series for
// that scrape while the scrape itself succeeds; gpuplane_device_telemetry_up
// says why.
//
// This package must not change GPU state, talk to the API server or decide
// health: it reports what the gpu backend, the health monitor and the
// kubelet say.
package metrics
