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
// over NVLink. Its format, keys and parser are part of gpuplane's
// contracts in api/gpunode; TopologyLabeler computes it.
//
// A node-feature-discovery features file carries labels only, so the
// annotation is written by NodeSink alone.
//
// This package must not talk to NVML (it reads gpu.Inventory), must not
// decide sharing or MIG layouts (it reports the Config it is given), and
// must never touch labels or annotations it did not produce: NodeSink owns
// its keys through its own server-side-apply field manager.
package labels
