// Package dra is gpuplane-scheduler's seam to Dynamic Resource
// Allocation: what it needs of k8s.io/dynamic-resource-allocation and of
// the ResourceClaim API, apart from the informer cache and the snapshot
// builder of package adapter, which call it.
//
//   - Features (features.go) is the one table of the DRA features the
//     scheduler serves. The structured allocator runs with it (Allocate),
//     the CEL environment follows it (CELFeatures), and the adapter's
//     device-set eligibility reads it: RefusedFeature says why a request
//     needing a feature that is off cannot be served, DeviceAllowed
//     whether the allocator may give a device to a request at all.
//   - MIGDevices (mig.go) groups a node's MIG devices into GPUs in MIG
//     mode by their parent index and counter set.
//   - EvalDeviceSet (sets.go) finds, for a shape of claims, the GPUs of
//     every node (Device, NodeDevices) that may serve them, as the
//     allocator would judge each device, and how many the claims ask
//     for: the DeviceSet the core places the pod's claims in; or why no
//     device can (an unknown class, a selector that fails, a feature that
//     is off).
//   - DeviceShare and ResultShare (shares.go) say what share of which GPU
//     a device, and an allocation result, stand for in the core's books.
//   - Allocate (allocate.go) runs the structured allocator, the one
//     kube-scheduler runs, for a pod's claims on one node, narrowed to the
//     devices the scheduler's core chose. It never widens the choice: nil
//     results mean the claims refuse it, and the adapter sends that back to
//     the core (see package adapter's doc).
//   - Writer (writer.go) writes claim allocations and reservations with
//     the resourceVersion it read, makes and deletes the claims of pods'
//     extended resources, and undoes its writes when a bind fails.
//
// The package keeps no state of its own and must not read informers or
// decide where a pod goes: its callers hold the cache, and the core
// chooses nodes and GPUs.
package dra
