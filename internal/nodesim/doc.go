// Package nodesim simulates the GPU side of a node's kubelet, so that the
// real gpuplane-agent runs unchanged on machines without a kubelet or GPUs.
//
// A Simulator owns one Node object of the API server (created by it, not
// managed by kwok) and a directory that stands for the kubelet's
// device-plugin directory. It:
//
//   - serves the device-plugin Registration service on <dir>/kubelet.sock,
//     dials every registered plugin, consumes its ListAndWatch stream and
//     keeps the Node's capacity (all devices) and allocatable (healthy
//     devices) for the resource as the kubelet computes them;
//   - keeps the Node Ready with a Lease heartbeat;
//   - admits the pods bound to the node as the kubelet's device manager does:
//     GetPreferredAllocation when the plugin offers it, then Allocate, never
//     handing a device ID to two pods; records each container's allocation
//     in the pod annotation gpupod.AllocationAnnotation; runs the pod (Running, then
//     Succeeded or Failed after its gpuplane.io/sim-duration); frees devices
//     when a pod ends or is deleted;
//   - plays the kubelet's DRA part as its DRA manager (pkg/kubelet/cm/dra)
//     and plugin manager do, which test/conformance drives gpuplane's
//     driver with: finds DRA drivers by their registration socket in
//     Dir/plugins_registry (GetInfo, NotifyRegistrationStatus) and drops
//     one whose socket goes away; before a pod bound to the node runs, it
//     checks every claim of the pod (from templates through the pod's
//     status, by name, and the claim of its extended resources: owned by
//     the pod when made from a template, reserved for it, allocated, its
//     drivers registered), records the pod as the claims' user, then calls
//     NodePrepareResources (k8s.io/kubelet/pkg/apis/dra/v1) once per driver
//     for the claims no other pod prepared; until that succeeds the pod
//     stays Pending with the kubelet's FailedPrepareDynamicResources event;
//     records the CDI devices on the pod (api/dra.PodClaimsAnnotation);
//     calls NodeUnprepareResources when the last pod of the node using a
//     claim ends, even one whose prepare failed, again with backoff until
//     the driver answers;
//   - serves the kubelet PodResources API v1 on
//     <dir>/pod-resources/kubelet.sock from its allocation records;
//   - optionally starts gpuplane-agent as a child process against that
//     directory (its own process group, killed with the simulator's
//     process), and starts it again with backoff when it exits, as the
//     kubelet restarts a DaemonSet's container.
//
// It must not run containers, schedule pods, manage nodes other than its
// own, or reach into the agent: it talks to plugins only over the device
// plugin and DRA APIs, as the kubelet does.
package nodesim
