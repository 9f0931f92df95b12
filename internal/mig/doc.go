// Package mig owns declarative MIG on a node. It
//   - reads NVIDIA mig-parted's config format as-is (version: v1,
//     mig-configs: NAME: [{device-filter, devices, mig-enabled,
//     mig-devices}]), strictly and within bounds, every error naming the
//     field (Parse);
//   - checks a layout against a GPU model's MIG profiles by placing every
//     GPU instance, so a layout fits exactly when the driver could create
//     it (Fit);
//   - computes the per-GPU changes a named config makes to a node, with
//     mig-parted's selection rules, so that only GPUs whose layout changes
//     are touched (NewPlan), and refuses a plan the device plugin's MIG
//     strategy would not offer (CheckStrategy);
//   - applies one GPU's change through the hardware seam, rolling back to
//     the previous layout when the driver refuses the new one (ApplyGPU);
//   - reconciles a node level-triggered (Reconciler): every pass starts
//     from the hardware and the node's nvidia.com/mig.config label,
//     validates before anything moves, withdraws the changing GPUs'
//     devices, evicts their pods (those of the device plugin and those
//     using DRA claims prepared on the GPUs, as the agent's Cluster finds
//     them), applies, and has the new devices advertised, reporting
//     pending, success or failed with a reason; a layout the hardware
//     refused (rolled back) is not tried again until the config name or
//     the ConfigMap's content changes;
//   - takes per-GPU overrides of the label's config (Reconciler.Overrides:
//     gpuplane-scheduler's gpuplane.io/mig-proposal on a node that follows
//     demand) and applies each only while its GPU holds no pod, never
//     evicting for it (override.go);
//   - renders and reads the gpuplane.io/mig-layout annotation, so that
//     `gpuplane mig plan` plans off the node exactly as the agent would.
//
// Profile names follow internal/gpu (gpu.MIGProfileName): "1g.10gb",
// "1g.10gb+me", "1c.3g.40gb". A "<c>c.<profile>" device is one compute
// instance of c slices alone in a GPU instance of the profile.
//
// What this package must not do: talk to NVML or the API server itself
// (the backend and the agent's adapters behind Hardware, Cluster and
// Devices do), or decide which config a node runs (the node's label does,
// and for the GPUs a proposal names, the scheduler's core).
package mig
