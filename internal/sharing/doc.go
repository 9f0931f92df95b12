// Package sharing is how the node's GPUs are shared out as device-plugin
// resources: time-slicing and MPS replicas, MIG strategies and whole GPUs.
// It turns the device-plugin config and the node's GPU inventory into the
// resources the kubelet sees: their names
// (nvidia.com/gpu, nvidia.com/mig-<profile>, renamed and .shared names),
// their device IDs (GPU and MIG UUIDs, <uuid>::<n> for replicas), the
// sharing mode of every device, and which devices to prefer for a request
// (NVLink-aware for whole GPUs; packed or distributed, on distinct physical
// GPUs, for replicas and MIG devices).
//
// It is pure computation over values: it must not talk to the kubelet,
// open sockets, write files or call the GPU backend.
package sharing
