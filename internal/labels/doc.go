// Package labels computes a GPU node's feature labels and writes them where
// the cluster reads them.
//
// The labels follow NVIDIA GPU Feature Discovery's names and value formats
// (nvidia.com/gpu.product, nvidia.com/gpu.memory in MiB, nvidia.com/mig-*,
// nvidia.com/cuda.*, ...), so node selectors written for GPU Feature
// Discovery keep matching. Each group of labels comes from one Labeler (one
// file each); a Runner evaluates them on an interval, or once, and hands the
// result to a Sink: the Node itself through server-side apply (NodeSink) or
// a node-feature-discovery features file (FeatureFileSink).
//
// # Topology annotation
//
// Besides labels, NodeSink writes the annotation gpuplane.io/gpu-topology,
// which gpuplane-scheduler reads to place multi-GPU pods on GPUs that talk
// over NVLink. Its value is compact JSON:
//
//	{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3,4,5,6,7],"nvlinks":18}],"numa":[0,0,0,0,1,1,1,1]}
//
// The fields:
//
//   - v is the format version, 1. A reader must reject versions it does
//     not know.
//   - gpus is the number of physical GPUs, indexed 0..gpus-1 as the device
//     plugin and nvidia-smi index them.
//   - groups are the NVLink islands: maximal sets of GPUs connected to each
//     other by NVLink, directly or through NVSwitch (connected components
//     of the NVLink graph). Each lists its GPU indices in ascending order
//     and the smallest NVLink count between two members (nvlinks): 18 on a
//     DGX H100, 12 on a DGX A100, 0 when two members reach each other only
//     through a third. A GPU without NVLink is in no group. Groups are
//     ordered by their lowest GPU index.
//   - numa gives each GPU's NUMA node, -1 when the platform does not say.
//
// ParseTopology reads the value back.
//
// A node-feature-discovery features file carries labels only, so the
// annotation is written by NodeSink alone.
//
// This package must not talk to NVML (it reads gpu.Inventory), must not
// decide sharing or MIG layouts (it reports the Config it is given), and
// must never touch labels or annotations it did not produce: NodeSink owns
// its keys through its own server-side-apply field manager.
package labels
