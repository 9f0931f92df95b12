// Package mig owns declarative MIG on a node: it reads NVIDIA mig-parted's
// config format as-is (version: v1, mig-configs: NAME: [{device-filter,
// devices, mig-enabled, mig-devices}]), strictly and within bounds; checks a
// layout against a GPU model's MIG profiles by placing every GPU instance
// (Fit); computes the per-GPU changes a named config makes to a node
// (NewPlan), so that only GPUs whose layout changes are touched; and applies
// one GPU's change through the hardware seam, rolling back to the previous
// layout when the driver refuses the new one (ApplyGPU).
//
// Profile names follow internal/gpu (gpu.MIGProfileName): "1g.10gb",
// "1g.10gb+me", "1c.3g.40gb". A "<c>c.<profile>" device is one compute
// instance of c slices alone in a GPU instance of the profile.
//
// What this package must not do: talk to NVML or the API server itself
// (the backend and the agent do), evict pods, or decide which config a node
// runs (the node's nvidia.com/mig.config label does).
package mig
