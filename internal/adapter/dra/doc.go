// Package dra is gpuplane-scheduler's one seam to Dynamic Resource
// Allocation. It owns all of DRA's state in the scheduler, and everything
// the scheduler needs of k8s.io/dynamic-resource-allocation (only this
// package imports it: a lint rule) and of the ResourceClaim API. Package
// adapter calls it through a small interface and reads no slice, class or
// claim allocation itself.
//
// What it owns:
//   - State (state.go) is DRA's cache: the ResourceSlices of gpuplane's
//     driver that name a node, the DeviceClasses, the ResourceClaims, with
//     the claims indexed by the node their allocation names. The
//     informers' handlers feed it (UpsertSlice, UpsertClass, UpsertClaim
//     and their deletions); NodeGPUs makes a node's GPUs from its slices
//     (device-plugin GPUs matched by index, else one claim-only GPU per
//     device, a GPU in MIG mode per parent GPU); ClaimShares says what each
//     running pod, and each claim no pod on the node holds, holds there.
//     Version changes whenever slices or classes do.
//   - The allocations in flight (inflight.go): AllocateChoice runs the
//     structured allocator over exactly the devices the core chose and
//     keeps the allocations and reservations it made, as kube-scheduler's
//     assume cache does, until the informer shows the claim allocated and
//     reserved for every pod (UpsertClaim) or the bind fails (Forget);
//     every snapshot counts them, so no device is given twice.
//   - The refusals (inflight.go): when the claims' constraints refuse the
//     core's choice, AllocateChoice allocates nothing, learns from the
//     allocator over the node's free devices which GPUs can serve the
//     claims, and returns a *RefusedError (Constraint: exact, or excluded
//     when none can). The pod's next device sets are exact on that node
//     until it is allocated, slices or classes change, or RefusalTTL
//     passes. So the core stays the only chooser of GPUs. Claims with
//     admin access take no GPU, so the core chose none: they are
//     allocated over all of the node's devices, and their results count
//     as held by nobody (AllocatedState, ClaimShares), as kube-scheduler
//     counts them.
//   - Memo (memo.go, claims.go, extended.go) is the snapshot builder's
//     memo: PodClaims resolves what a pending pod asks through its
//     ResourceClaims, or for an extended resource a DeviceClass maps
//     through the claim kube-scheduler would make for it (ClaimableResource,
//     AsksMappable), into Claims: the claims to allocate and to join, the
//     node they pin the pod to, and the device set the core places them in
//     (made exact where a refusal stands); or why the pod waits (Wait). The
//     sets are kept by claim shape and by claim object while the State's
//     Version and the builder's nodes stay the same. WithDeviceSets gives
//     the core's GPUs the names of the sets in use.
//
// What it keeps no state for:
//   - Features (features.go) is the one table of the DRA features the
//     scheduler serves. The structured allocator runs with it (Allocate),
//     the CEL environment follows it (CELFeatures), and device-set
//     eligibility reads it: RefusedFeature says why a request needing a
//     feature that is off cannot be served, DeviceAllowed whether the
//     allocator may give a device to a request at all.
//   - MIGDevices (mig.go) groups a node's MIG devices into GPUs in MIG
//     mode by their parent index and counter set.
//   - EvalDeviceSet (sets.go) finds, for a shape of claims, the GPUs of
//     every node (Device, NodeDevices) that may serve them, as the
//     allocator would judge each device, and how many the claims ask
//     for; or why no device can (an unknown class, a selector that fails,
//     a feature that is off); for requests with admin access, which take
//     no device, only the nodes that have the devices (AdminNodes), and
//     resolveClaims lets a pod use them only in a namespace labelled
//     resource.kubernetes.io/admin-access=true, as the API server does.
//     A request for all matching devices (allocationMode: All) makes the
//     set All, every GPU of it on the chosen node; requests with
//     firstAvailable subrequests make it a list of alternative sets
//     (FirstOf), one per combination of subrequests in the allocator's
//     order, each naming its picks, which the core chooses among
//     (model.Request.FirstOf) and AllocateChoice holds the allocator to.
//   - DeviceShare and ResultShare (shares.go) say what share of which GPU
//     a device, and an allocation result, stand for in the core's books: a
//     claim asking for consumable capacity of one GPU is a share of it, and
//     an allocated share counts what it consumed.
//   - Allocate (allocate.go) runs the structured allocator, the one
//     kube-scheduler runs, for a pod's claims on one node, narrowed to the
//     devices the scheduler's core chose. It never widens the choice: nil
//     results mean the claims refuse it.
//   - Writer (writer.go) writes claim allocations and reservations with
//     the resourceVersion it read, makes and deletes the claims of pods'
//     extended resources, and undoes its writes when a bind fails.
//
// A State and its Memo are not safe for concurrent use: package adapter's
// cluster cache calls them under its lock. The package never reads an
// informer or decides where a pod goes: the adapter feeds it, and the core
// chooses nodes and GPUs.
package dra
