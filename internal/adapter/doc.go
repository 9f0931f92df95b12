// Package adapter runs gpuplane's pure scheduling core (internal/scheduler)
// on a live Kubernetes cluster. Informers keep an incrementally maintained
// cache of nodes, pods, Queues, PodGroups, PriorityClasses,
// PodDisruptionBudgets and namespaces; each cycle turns the cache into a
// model.Snapshot, runs the core and carries out its decisions.
//
// The parts, each owning its state behind its own methods:
//   - clusterCache (cache.go): the informers' objects, converted once, and
//     the indexes by group and node, with the binds in flight assumed on
//     their nodes; read and written only through its methods, under its
//     own lock.
//   - builder (snapshot.go): turns the cache into a snapshot, keeping its
//     memos (node classes, per-node allocations) from cycle to cycle and
//     recomputing only what changed, one concern a file: pod classes, the
//     standard predicates folded into node labels (classes.go); pending
//     groups and their queues (groups.go); the running allocations by node
//     (running.go); the DRA memo (dra.Memo, asked through dra.go). What
//     each running pod holds on its node is resolved by nodeHoldings
//     (holdings.go), from five sources
//     (claims, the node's record, binds in flight, the scheduler's
//     annotation, automatic shares) in the precedence its doc comment
//     gives, the one place it is written.
//   - binder (binder.go): carries decisions out through a clusterWriter
//     (apiWriter, or an in-memory fake in the unit tests) and owns what it
//     is waiting for: the core's holds, refused evictions, gangs to resume.
//   - loop (loop.go): runs the cycles in order, and reports (report.go,
//     status.go) through a statusSink.
//   - DRA (package internal/adapter/dra, through dra.go): DRA's state
//     (dra.State: slices, classes, claims, allocations in flight,
//     refusals) lives in the cache, under its lock, fed by the informers'
//     handlers; the builder asks it for nodes' GPUs, claim-backed requests
//     and their device sets (dra.Memo); the binder asks it to allocate
//     claims on the core's choice, and writes them with dra.Writer. No
//     other file reads a slice, a class or a claim's allocation, and only
//     that package imports k8s.io/dynamic-resource-allocation (a lint
//     rule).
//
// It carries out binds through
// the pods/binding subresource (a gang's pods only once the whole gang has a
// placement), evictions through the Eviction API so PodDisruptionBudgets
// hold, pod conditions and events that say why a pod waits, and PodGroup and
// Queue status. A group placed by evictions is the core's hold
// (model.Hold): the adapter keeps the holds the last cycle returned and
// passes them back in the next snapshot, with a one-minute HoldTimeout,
// and ends one itself only when the API server refuses one of its
// evictions (a PodDisruptionBudget); when and where the group binds is the
// core's decision. Run adds leader election on a Lease, /metrics, /healthz and
// /readyz, and the start-up reconcile that leaves no gang half-bound.
//
// Resources besides CPU, memory and GPUs (resources.go). A node's
// allocatable of every other resource, pods included, becomes
// model.Node.Allocatable; a pod's requests of them (resourcehelper's sums,
// as the kubelet counts) model.Request.Scalars, and the host ports of its
// containers and sidecars model.Request.HostPorts; each bounded, a node
// that states an impossible quantity refused naming the field. The core
// counts them against what the node's pods hold: staticFit only checks
// affinity and taints. A pod's nvidia.com/gpu: k is also k replicas
// (model.Request.Replicas with ShareResource nvidia.com/gpu), which the
// core takes on a node time-sliced under that name; nvidia.com/gpu.shared:
// n is n replicas of a GPU shared under that name, whose sharing factor
// convertNode reads from nvidia.com/gpu.replicas or, without it, derives
// from the node's replicas over nvidia.com/gpu.count (nodeDevices).
// Volumes (volumes.go): PVs, claims, StorageClasses and CSINodes are read
// as kube-scheduler's VolumeBinding, VolumeZone, VolumeRestrictions and
// NodeVolumeLimits read them. What depends on the pod alone (bound PVs'
// node affinity and zone labels, the nodes where an unbound claim of a
// WaitForFirstConsumer class may get a PV or be provisioned) narrows its
// class; what the pods of one cycle take from each other (a PV, a
// ReadWriteOncePod claim, a node's CSI attach slots) the core counts
// (model.Request.Volumes, model.Node.Volumes), and the binder writes the
// PV the core chose (model.Bind.Volumes) to the claim, or the claim's
// volume.kubernetes.io/selected-node for provisioning, before it binds
// the pod. A pod with a claim missing, unbound with an Immediate class,
// or ReadWriteOncePod and used by another pod, waits with its reason.
//
// MIG layouts that follow demand (miglayouts.go). A node labelled
// gpuplane.io/mig-layout-policy=follow-demand is given to the core with its
// MIG profiles and standing proposals (model.NodeMIG, from the agent's
// gpuplane.io/mig-layout and gpuplane.io/mig-proposal annotations, a
// proposal the agent has not reported being pending); the hysteresis comes
// from the config. The core's Decisions.Layouts are written, merged per
// node, into gpuplane.io/mig-proposal within the cycle, and counted as
// pending until the cache shows them.
//
// ResourceClaims (package internal/adapter/dra). Informers keep the
// ResourceSlices of gpuplane's driver (api/dra.DriverName) that name a
// node, the DeviceClasses and the ResourceClaims, slimmed by transforms
// (other drivers' devices and the claims' device status are dropped). A
// node's GPUs are those its device plugin advertises, with the slice's
// device whose index attribute names each; a node without any gets one
// claim-only GPU per device of type gpu (model.GPU.ClaimOnly): one GPU,
// one entry in the core's books, whichever way a pod asks for it. The
// devices of type mig of one GPU (by parentIndex) make one GPU in MIG mode
// whose compute slices are its counter set's (api/dra.CounterComputeSlices),
// laid out on demand (dynamic MIG). For the
// pending pods that name claims, the claims still to allocate are turned
// into a device set (model.GPU.DeviceSets, model.Request.DeviceSet): the
// GPUs that pass their DeviceClass's and their own CEL selectors,
// evaluated with dynamic-resource-allocation's CEL cache once per claim
// shape while slices and classes stay the same, and how many devices they
// ask for in all. A device with a NoSchedule or NoExecute taint the
// request does not tolerate is in no set, as the allocator never gives it.
// A request whose selectors pass whole GPUs is for whole GPUs; one that
// passes only MIG devices is for one MIG device, which the core places as
// the smallest passing device's compute slices of a GPU in MIG mode
// (model.Request.MIGSlices), among the GPUs where a passing device sits. So the core decides, with its own filters and
// fragmentation-aware scores, which node and which of those GPUs; the
// adapter only says which GPUs may serve. A claim already allocated pins
// its pod to the allocation's node. Claims that cannot be allocated (an
// unknown DeviceClass, a selector that fails, what the scheduler does not
// allocate) hold the pod's group back with a reason naming the claim and
// the field, before the core sees it.
//
// All of this is package internal/adapter/dra's: its State holds the
// slices, classes, claims, in-flight allocations and refusals (kept in
// the cache, under its lock), its Memo the builder's device sets, and one
// table of DRA features (dra.Features) is what the structured allocator
// runs with and device-set evaluation reads, so a device is in a set
// exactly when the allocator may give it and a request needing a feature
// that is off waits with the reason. The adapter's dra.go is the one file
// that calls it.
//
// The core is the only chooser of GPUs. Carrying a bind out, the binder
// hands the core's choice to the structured allocator
// (k8s.io/dynamic-resource-allocation/structured, the one kube-scheduler
// runs) over exactly the chosen devices (for a MIG instance, every MIG
// device of the chosen GPU, so that the GPU's shared counters decide the
// placement), and the pod keeps the shares the core chose. When the
// claims' constraints (matchAttribute, distinctAttribute, requests of
// different classes) refuse those devices, nothing is allocated and the
// group is not bound this cycle; the refusal goes back to the core: the
// next snapshots give that pod a device set made exact on that node, only
// the GPUs the allocator finds to satisfy the claims over the node's free
// devices, none when it finds none (dra.Memo), until the pod
// is allocated, slices or classes change, or a minute passes. Each case
// counts in gpuplane_scheduler_claim_choice_refusals_total, by constraint
// (exact or excluded). A group whose claims do not all allocate is not
// bound this cycle. The allocations are in flight from then on
// (dra.State, as kube-scheduler's assume cache): every snapshot
// counts them on their nodes until the informer shows them, so no device
// is given twice. The writer (dra.Writer) adds the delete-protection
// finalizer and writes status.allocation and status.reservedFor, each with
// the resourceVersion it read, before binding; a gang's claims are all
// written before its PodGroup commit and any bind, and released
// (allocation and reservation cleared, finalizer removed) when a write,
// the commit or a bind fails. Devices held by claims count for the pod
// that holds them, or, for a claim no pod on its node holds, as a
// non-preemptible allocation of its own. A claim that asks for consumable
// capacity is a share of one GPU to the core (dra.ResultShare), and an
// allocated share counts what it consumed.
//
// Extended resources served through DRA (dra.Memo, extended.go there). A pending pod that
// asks for nvidia.com/gpu or one nvidia.com/mig-<profile> and names no
// claim, while a DeviceClass maps the resource (spec.extendedResourceName;
// the newest such class, as kube-scheduler picks), or for the resource a
// class implies (deviceclass.resource.kubernetes.io/<class>, which no
// node advertises), is given to the core with one request: that many
// whole GPUs, or one MIG device, of a device set that is, per node, every
// device-plugin GPU where the node's allocatable lists the resource and
// the class's devices elsewhere (the node-dependent eligibility is the set's per-node mask;
// the core is unchanged). The claim kube-scheduler's DRAExtendedResource
// contract describes (generateName <pod>-extended-resources-, controlled
// by the pod, the extended-resource-claim annotation, a request
// container-<i>-request-<j> per container) is kept in the cache until
// the binder needs it, its allocation in flight under a key of the pod's
// UID. The binder binds the pod as any device-plugin pod when the chosen
// node advertises the resource; otherwise the writer makes the claim,
// writes finalizer, allocation and reservation, patches the pod's
// status.extendedResourceClaimStatus and binds, and deletes the claim if
// any step or the bind fails. A claim found for the pod (by controller
// and annotation) is the pod's claim from then on: allocated, it pins the
// pod to its node. A bound pod holding such a claim counts the claim's
// devices in place of its request's GPUs. Pending pods asking for
// nvidia.com/gpu keep their containers in the cache (transform.go) so the
// requests can be named. A class whose selectors fail, one that selects
// MIG devices, or requests that sum to more than the pod's GPUs leave the
// pod to the device plugin's nodes; nvidia.com/mig-<profile> is not
// served through a claim.
//
// What it says of waiting groups and queues it renders from the core's
// decisions (model.Unplaced, model.QueueStatus): it asks the core to
// explain a bounded number of groups per cycle and words the answer, never
// re-deriving it. Every Node, Pod, Queue and PodGroup is read through
// bounded parsers (api/gpunode, api/gpupod, convert.go): a bad one is left
// out with an event naming the field, never trusted, never fatal.
//
// The package must not make scheduling decisions of its own beyond the
// standard predicates the core's model cannot express (required node
// affinity, taint effects and the static part of volumes, which it folds
// into a per-pod node class), and
// it must not call the API server from inside the core's cycle: the core
// sees only the snapshot.
package adapter
