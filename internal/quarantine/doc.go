// Package quarantine takes a GPU that had a critical fault out of service
// and brings it back once it has proven itself, telling the cluster at
// every step.
//
// The health monitor (internal/health) notices the fault within
// milliseconds and withdraws the GPU's devices from the kubelet, so the
// node's allocatable drops by them. This package does the rest, per GPU,
// by the policy of the fault's XID class (api/config/v1
// health.quarantine):
//
//   - a Node condition, GPUQuarantine, naming each quarantined GPU (index
//     and UUID), its XID and its step;
//   - for a class of scope node (by default XID 79, fallen off the bus),
//     the NoSchedule taint gpuplane.io/gpu-fault on the Node; a class of
//     scope gpu taints nothing, as the withdrawn devices already keep pods
//     off that GPU and the node's other GPUs stay in use;
//   - eviction, through the Eviction API, of only the pods the kubelet's
//     PodResources API shows holding a device of that GPU, and, with the
//     DRA driver on, the pods using claims prepared on it
//     (KubePods.SetClaimPods);
//   - a reset through the hardware seam (gpu.Resetter) when the class
//     calls for one;
//   - revalidation: the GPU must answer and stay free of critical events
//     for the validation time;
//   - the taint and condition lifted when it passes.
//
// A fault on a MIG device quarantines its whole GPU: a reset is GPU-wide,
// so the pods on the GPU's other MIG devices are evicted too.
//
// Every step is a Node event and a gpuplane_gpu_quarantine_* metric, and
// the steps are recorded in the Node's gpuplane.io/gpu-quarantine
// annotation so that a restarted agent resumes them.
//
// # State machine
//
// Each GPU is in service (not tracked) or in one state below. Every state
// has a timeout and a next step, so a GPU is never left without one:
//
//	in service --fault--> draining --> resetting --> validating --> returned
//	                          |             |             |             |
//	                          |  failed     | reset       | fault or    | window
//	                          |  again      | refused     | no answer   | passed
//	                          v             v             v             v
//	                        held <----------+-------------+         in service
//	                          |
//	                          +--retryHeldAfter--> resetting (or validating)
//
// The states:
//
//   - draining: evict the GPU's pods (refused evictions, as under a
//     PodDisruptionBudget, are retried); next when no pod holds the GPU,
//     or after evictionTimeout, when the reset is tried all the same. A
//     class that does not evict skips it.
//   - resetting: reset the GPU, bounded by resetTimeout; next validating.
//     A refused reset, or a driver without one, holds the GPU. A class
//     that does not reset goes straight to validating. With the DRA
//     driver on, its devices are read again after the reset (and after
//     the hold that waited for a reset by hand), as a reset destroys the
//     GPU's MIG instances and applies a pending MIG mode, so that its
//     ResourceSlices show what the GPU has; a failed read is an event and
//     a metric, and the revalidation goes on.
//   - validating: the GPU must answer, with no critical event, for
//     `validation`; a fault, or no answer within validationTimeout, holds
//     it. A GPU in MIG mode must also still have the MIG devices the
//     device plugin offers: a reset destroys MIG instances, so it returns
//     only once its layout is applied again.
//   - held: out of service, and the condition says why; after
//     retryHeldAfter it is reset and revalidated again (revalidated only,
//     when the driver has no reset, so a GPU reset by hand returns).
//   - returned: back in service; a fault within `window` counts as
//     failing again, and the GPU is drained and held instead of reset.
//
// # What this package must not do
//
// It decides nothing about placement: it withdraws devices (through the
// health monitor's Hold) and taints, and the schedulers and the kubelet
// act on those. It evicts no pod that does not hold a device of the failed
// GPU, and never deletes pods directly. It talks to the API server only
// through the NodeWriter and Pods seams and to the GPUs only through the
// GPUs and Inventory seams, so that the state machine runs under test on a
// fake clock.
package quarantine
