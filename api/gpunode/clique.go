package gpunode

import "strconv"

// LabelGPUClique names the multi-node NVLink domain a node's GPUs sit in
// (the NVLink fabric of a GB200 or GB300 NVL72 rack), as NVIDIA's GPU
// Feature Discovery writes it: "<cluster UUID>.<clique ID>", the fabric's
// cluster UUID and the partition of it the GPUs belong to. Nodes with the
// same value reach each other's GPUs over NVLink. It is absent on a node
// whose GPUs have no such fabric, have not finished joining it, or
// disagree about it. A Topology level may name it.
const LabelGPUClique = LabelPrefix + "gpu.clique"

// CliqueValue formats the LabelGPUClique value of a fabric.
func CliqueValue(clusterUUID string, cliqueID uint32) string {
	return clusterUUID + "." + strconv.FormatUint(uint64(cliqueID), 10)
}

// EnvSimulateFabric gives gpuplane-agent's simulated GPUs their multi-node
// NVLink fabric, "<cluster UUID>.<clique ID>", when its --simulate-fabric
// flag is not given: the rack a node simulator's tray sits in, handed to
// the agent's pod beside EnvSimulate.
const EnvSimulateFabric = "GPUPLANE_SIMULATE_FABRIC"
