// Package dra is gpuplane-agent's Dynamic Resource Allocation driver
// (gpu.gpuplane.io): a kubelet plugin built on
// k8s.io/dynamic-resource-allocation's kubeletplugin and resourceslice
// helpers.
//
// It publishes one pool per node whose ResourceSlices describe every GPU
// with the attributes NVIDIA's DRA driver publishes (api/dra), and, for each
// GPU in MIG mode, every MIG profile at every placement as a partitionable
// device over the GPU's shared counters (memory, compute slices, one
// counter per memory slice): the scheduler's allocator keeps overlapping
// instances apart, and the driver creates the instance when the claim is
// prepared (dynamic MIG) unless one of that profile and placement exists.
//
// Prepare turns a claim's allocation into CDI devices: it checks every
// device against the node's ledger (internal/ledger, shared with the device
// plugin), decodes the claim's opaque GpuConfig / MigDeviceConfig strictly,
// creates MIG instances, writes one CDI spec per claim, and checkpoints what
// it did to a file (write, fsync, rename) before it answers. A claim's
// sharing config is applied (sharing.go): MPS starts a control daemon per
// claim through internal/mps with the claim's limits, its directories in
// the CDI spec; time-slicing sets the GPUs' slice through gpu.TimeSlicer.
// With Options.SharedGPUs whole GPUs are published for consumable capacity
// (capacity.go) and each claim's share is held in the ledger and told to
// its containers. Unprepare undoes
// exactly what the checkpoint records. Both are idempotent and survive a
// restart: on start, claims caught half-prepared are rolled back (an MPS
// control daemon the killed agent left for one is asked to quit) and the
// MIG instances of prepared claims are checked. A device that is unhealthy
// or that the device plugin gave a pod is tainted in the ResourceSlice.
//
// The agent's MIG reconciler changes GPU layouts under it (layout.go): the
// driver names the claims and the MIG instances it holds on a GPU (the
// latter are the claims', never the layout's), taints a GPU being
// re-partitioned (gpu.gpuplane.io/mig-changing) and prepares nothing on
// it, and reads the GPUs again afterwards (Refresh) to republish. The
// agent's GPU quarantine has it read them again after a GPU's reset too.
//
// It must not choose devices (the scheduler's allocation is the decision),
// talk to NVML except through the gpu seam, or read the device plugin's
// config itself: the agent hands it the backend, the ledger and a health
// source.
package dra
