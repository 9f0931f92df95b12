// Package gpu is gpuplane's one seam to GPU hardware.
//
// Everything else in gpuplane (device plugin, health, feature labels, metrics,
// MIG management, the CLI's inventory) sees GPUs only through the small
// interfaces declared here: Inventory, Telemetry, Events and MIGManager,
// gathered in Backend, and optional capabilities found by type assertion
// (Resetter, TimeSlicer). Three implementations exist:
//
//   - gpu/nvml talks to the NVIDIA driver through NVML. It is the only package
//     in gpuplane that imports go-nvml's bindings.
//   - gpu/sim is a complete simulated node (DGX A100/H100/H200/B200 or a
//     profile read from YAML) with telemetry that follows a simulated load,
//     events and fault injection. Every machine gpuplane is built and tested
//     on lacks a GPU, so sim is what tests and the demo run against.
//   - Null (in this package) is a node with zero GPUs and a reason, for
//     operators who set failOnInitError: false.
//
// This package must not import a backend, talk to Kubernetes, or keep
// policy (health decisions, sharing, naming of resources): it reports what
// the hardware says and lets the caller decide.
package gpu
