package sim

// cloudSystems are built-in profiles of the GPU servers people rent: N GPUs
// of one model, named N x model ("4xt4"). They are profile files (the
// format of the package documentation); the GPU names are those NVML
// reports, so the agent labels them as on the real machine
// (nvidia.com/gpu.product=Tesla-T4, NVIDIA-A100-SXM4-80GB, ...).
var cloudSystems = []struct{ name, file string }{
	// Four T4s on PCIe, two per CPU (AWS g4dn.12xlarge, GCP n1 with 4 T4).
	{"4xt4", `
version: v1
name: 4xt4
gpus:
  - model: T4
    count: 4
    numaNodes: [0, 0, 1, 1]
`},
	// Eight V100 SXM2 32GB in the hybrid cube-mesh of DGX-1 and AWS
	// p3dn.24xlarge: each GPU has NVLinks to four others, none to the rest.
	{"8xv100", `
version: v1
name: 8xv100
gpus:
  - model: V100-SXM2-32GB
    count: 8
    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
topology:
  pairs:
    - {gpus: [0, 1], nvlink: 1}
    - {gpus: [0, 2], nvlink: 1}
    - {gpus: [0, 3], nvlink: 2}
    - {gpus: [0, 4], nvlink: 2}
    - {gpus: [1, 2], nvlink: 2}
    - {gpus: [1, 3], nvlink: 1}
    - {gpus: [1, 5], nvlink: 2}
    - {gpus: [2, 3], nvlink: 2}
    - {gpus: [2, 6], nvlink: 1}
    - {gpus: [3, 7], nvlink: 1}
    - {gpus: [4, 5], nvlink: 1}
    - {gpus: [4, 6], nvlink: 1}
    - {gpus: [4, 7], nvlink: 2}
    - {gpus: [5, 6], nvlink: 2}
    - {gpus: [5, 7], nvlink: 1}
    - {gpus: [6, 7], nvlink: 2}
`},
	// Four A10G on PCIe (AWS g5.12xlarge).
	{"4xa10g", `
version: v1
name: 4xa10g
gpus:
  - model: A10G
    count: 4
    numaNodes: [0, 0, 1, 1]
`},
	// Eight L4 on PCIe (AWS g6.48xlarge, GCP g2-standard-96).
	{"8xl4", `
version: v1
name: 8xl4
gpus:
  - model: L4
    count: 8
    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
`},
	// Eight L40S on PCIe (AWS g6e.48xlarge).
	{"8xl40s", `
version: v1
name: 8xl40s
gpus:
  - model: L40S
    count: 8
    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
`},
	// Eight A100 80GB SXM4 on NVSwitch, twelve NVLinks each (DGX A100
	// 80GB, AWS p4de.24xlarge, GCP a2-ultragpu-8g).
	{"8xa100-80gb", `
version: v1
name: 8xa100-80gb
gpus:
  - model: A100-SXM4-80GB
    count: 8
    numaNodes: [3, 3, 1, 1, 7, 7, 5, 5]
topology:
  nvlink: 12
`},
	// Eight H100 PCIe, without NVLink bridges.
	{"8xh100-pcie", `
version: v1
name: 8xh100-pcie
gpus:
  - model: H100-PCIE-80GB
    count: 8
    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]
`},
}
