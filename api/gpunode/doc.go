// Package gpunode is the contract of a GPU node between gpuplane's
// processes: the label and annotation keys gpuplane-agent writes on a Node
// and gpuplane-scheduler, the CLI and the node simulator read, and the
// bounded parsers every reader uses for their values.
//
// Everything read from a Node is untrusted: an operator can edit it and a
// buggy or old agent can write it. Each parser here checks its value
// against the bounds below and returns an error that names the key, what
// was found and what a valid value looks like; it never allocates in
// proportion to a number it was given beyond those bounds. Readers report
// a Node whose values fail to parse and leave it out, they never trust or
// crash on it.
//
// # Topology annotation
//
// gpuplane.io/gpu-topology tells gpuplane-scheduler which GPUs talk over
// NVLink. Its value is compact JSON:
//
//	{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3,4,5,6,7],"nvlinks":18}],"numa":[0,0,0,0,1,1,1,1]}
//
// The fields:
//
//   - v is the format version, 1. A reader rejects versions it does not
//     know.
//   - gpus is the number of physical GPUs, indexed 0..gpus-1 as the device
//     plugin and nvidia-smi index them (at most MaxGPUs).
//   - groups are the NVLink islands: maximal sets of GPUs connected to each
//     other by NVLink, directly or through NVSwitch. Each lists its GPU
//     indices in ascending order and the smallest NVLink count between two
//     members (nvlinks): 18 on a DGX H100, 12 on a DGX A100, 0 when two
//     members reach each other only through a third. A GPU without NVLink
//     is in no group; no GPU is in two.
//   - numa gives each GPU's NUMA node, -1 when the platform does not say.
//   - mig (optional) lists, per GPU index, the compute slices of each MIG
//     instance laid out on that GPU ([[1,1,1,1,1,1,1],[3,3]]: GPU 0 split
//     into seven 1-slice instances, GPU 1 into two 3-slice ones); a GPU not
//     in MIG mode has an empty list, and the list may end early. The
//     scheduler places a MIG pod on a GPU that has a free instance of the
//     size it asks for, by the same index the device plugin uses.
//
// # GPU quarantine
//
// While a GPU is quarantined after a critical fault, gpuplane-agent keeps
// the GPUQuarantine condition on its Node (ConditionGPUQuarantine), taints
// the Node TaintGPUFault:NoSchedule when the fault affects the whole node,
// and records each GPU's step in QuarantineAnnotation, parsed by
// ParseQuarantine, so that a restarted agent resumes it.
//
// # MIG layouts that follow demand
//
// A Node labelled LabelMIGLayoutPolicy=follow-demand lets
// gpuplane-scheduler re-partition its idle GPUs: the scheduler writes the
// layout it proposes for each GPU in MIGProposalAnnotation (ParseMIGProposal,
// one MIGProposalGPU per GPU, the one definition of a proposal that the
// scheduler's core, its adapter, the simulator and the agent share), and
// gpuplane-agent applies each while its GPU holds no pod, reporting the
// result in MIGLayoutAnnotation and ConditionMIGConfig.
//
// This package must not import anything of gpuplane's internal/ tree: the
// agent, the scheduler and the CLI all import it.
package gpunode
