package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// MilliPerGPU is the milli-GPU capacity of one whole GPU.
const MilliPerGPU = 1000

// GPU is one physical GPU of a node as the scheduler sees it.
type GPU struct {
	// Index is the GPU's index on its node (0-based, unique per node).
	Index int `json:"index"`
	// Model is the product short name used for matching (for example "A100"
	// or the trace's "V100M32").
	Model string `json:"model"`
	// MemoryMiB is the GPU's framebuffer; 0 means not tracked.
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// Milli is the shareable capacity in thousandths of a GPU; 0 means 1000.
	Milli int64 `json:"milli,omitempty"`
	// MIGSlices is the number of MIG compute slices when the GPU is in MIG
	// mode (7 on an A100/H100); 0 when MIG is off. A MIG GPU only serves
	// MIG requests.
	MIGSlices int `json:"migSlices,omitempty"`
	// MIGInstanceSlices, when not 0, says the GPU's MIG instances are laid
	// out ahead (a static layout, as mig-parted makes) and all have this
	// many slices: only requests for that size fit, MIGSlices of them in
	// all. 0 means any size that fits the free slices.
	MIGInstanceSlices int `json:"migInstanceSlices,omitempty"`
	// SharesOnly GPUs are offered only as shares (their node advertises
	// replicas under a name of their own, nvidia.com/gpu.shared): requests
	// for whole GPUs skip them. WholeOnly GPUs are offered only whole:
	// requests for a share skip them. Neither set, a GPU serves both.
	SharesOnly bool `json:"sharesOnly,omitempty"`
	WholeOnly  bool `json:"wholeOnly,omitempty"`
	// ShareResource is the resource its node offers the GPU's shares
	// under (nvidia.com/gpu.shared, or nvidia.com/gpu when time-slicing
	// keeps the plain name); a share asked through another resource skips
	// the GPU. Empty: any.
	ShareResource string `json:"shareResource,omitempty"`
	// MinShareMilli is the least a share takes of the GPU: its node hands
	// shares out as replicas, one per pod however small the pod's part,
	// so a share takes at least 1000/replicas. 0: no least.
	MinShareMilli int64 `json:"minShareMilli,omitempty"`
	// NUMANode is the NUMA node the GPU is attached to (-1 if unknown).
	NUMANode int `json:"numaNode,omitempty"`
	// Withdrawn GPUs are out of service (their node quarantined them after
	// a fault): they serve no new request; what runs on them stays
	// counted.
	Withdrawn bool `json:"withdrawn,omitempty"`
	// DeviceSets names the device sets the GPU belongs to: the sets of
	// devices that satisfy a ResourceClaim's requests (Request.DeviceSet),
	// as the driver of the core evaluated its selectors; sorted and
	// comma-separated, so that a GPU stays a comparable value.
	DeviceSets string `json:"deviceSets,omitempty"`
	// ClaimOnly GPUs are offered only through ResourceClaims (a DRA
	// driver publishes them and no device plugin advertises them):
	// requests without a DeviceSet skip them.
	ClaimOnly bool `json:"claimOnly,omitempty"`
	// Repartitioning GPUs have a MIG layout proposed for them that their
	// node has not reported applied (NodeMIG.Pending): they serve no new
	// request until it has.
	Repartitioning bool `json:"repartitioning,omitempty"`
}

// InSet reports whether the GPU belongs to the device set name.
func (g *GPU) InSet(name string) bool {
	for rest := g.DeviceSets; rest != ""; {
		var s string
		s, rest, _ = strings.Cut(rest, ",")
		if s == name {
			return true
		}
	}
	return false
}

// ShareMilli is how much of g a share of req takes: Replicas of the GPU's
// replicas when the request counts replicas, else the request's part, at
// least the GPU's MinShareMilli. More than the GPU's capacity (more
// replicas than it has) fits nowhere on it.
func (g *GPU) ShareMilli(req *Request) int64 {
	if req.Replicas > 0 && g.MinShareMilli > 0 {
		return int64(req.Replicas) * g.MinShareMilli
	}
	return max(req.GPUMilli, g.MinShareMilli)
}

// Capacity returns the GPU's milli capacity with the default applied.
func (g GPU) Capacity() int64 {
	if g.Milli <= 0 {
		return MilliPerGPU
	}
	return g.Milli
}

// TaintUnschedulable is the taint an Unschedulable node repels requests
// with: one whose tolerations tolerate it (a NoSchedule taint of this key)
// may still go there, as Kubernetes lets a pod that tolerates the cordon's
// node.kubernetes.io/unschedulable taint onto a cordoned node (a
// DaemonSet's, say).
const TaintUnschedulable = "node.kubernetes.io/unschedulable"

// Taint repels pods that do not tolerate it.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect,omitempty"`
}

// Toleration lets a pod run on a node with a matching taint. An empty Value
// with Exists set tolerates any value of Key; an empty Key tolerates all.
type Toleration struct {
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	Exists bool   `json:"exists,omitempty"`
}

// Node is a schedulable machine.
type Node struct {
	Name      string            `json:"name"`
	MilliCPU  int64             `json:"milliCPU"`
	MemoryMiB int64             `json:"memoryMiB"`
	GPUs      []GPU             `json:"gpus,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Taints    []Taint           `json:"taints,omitempty"`
	// Topology is the GPU-to-GPU connectivity (NVLink/PCIe); nil if unknown.
	Topology *gpu.Topology `json:"-"`
	// Unschedulable nodes keep their running pods but take no new ones,
	// save those whose request tolerates TaintUnschedulable.
	Unschedulable bool `json:"unschedulable,omitempty"`
	// Disrupted nodes are about to go away (a spot instance reclaimed, an
	// autoscaler's consolidation): they take no new pods, and every group
	// with a pod on one is evicted whole (EvictDisruption), with notice,
	// to be placed again elsewhere rather than run on with members lost;
	// an elastic group that keeps its MinMember on the other nodes loses
	// only its pods on this one (Eviction.Shrink).
	Disrupted bool `json:"disrupted,omitempty"`
	// Coming nodes have yet to register their GPUs (a node an autoscaler
	// just bought, whose device plugin is still starting): GPUs lists
	// what the node will offer once it has. A coming node takes no pod
	// until then; a group that would fit were it up waits for it
	// (UnplacedNodesComing) rather than for capacity, so that no
	// autoscaler buys another node for it meanwhile.
	Coming bool `json:"coming,omitempty"`
	// MIG is set on a node whose MIG layouts follow demand: the core may
	// propose new layouts for its idle GPUs (layout.go).
	MIG *NodeMIG `json:"mig,omitempty"`
	// Domains holds the labels pod constraints read topology keys from
	// (podaffinity.go), apart from Labels so that they do not split nodes
	// into classes; a key it lacks is read from Labels.
	Domains map[string]string `json:"domains,omitempty"`
	// Allocatable is the node's allocatable of every resource besides
	// CPU, memory and the GPUs above, and of pods, in the node's unit;
	// nil checks none of them (resources.go).
	Allocatable map[string]int64 `json:"allocatable,omitempty"`
	// Volumes is what the node allows of volumes (volumes.go); nil: no
	// limits.
	Volumes *NodeVolumes `json:"volumes,omitempty"`
}

// Request is what one pod asks for.
type Request struct {
	MilliCPU  int64 `json:"milliCPU"`
	MemoryMiB int64 `json:"memoryMiB"`
	// GPUs is the number of whole GPUs.
	GPUs int `json:"gpus,omitempty"`
	// GPUMilli is a share of one GPU in thousandths (1..999) when GPUs is 0;
	// with Replicas it is an estimate, up to a whole GPU (1..1000).
	GPUMilli int64 `json:"gpuMilli,omitempty"`
	// Replicas asks for that many replicas of one GPU shared without a
	// part named (nvidia.com/gpu.shared: N), in the node's unit: on a GPU
	// shared under ShareResource the share is N of its replicas
	// (GPU.InReplicas, GPU.ShareMilli), so it follows each node's sharing
	// factor, and a pod asking for more replicas than one GPU has fits no
	// GPU of the node. GPUMilli is then the largest such share on any
	// node, at most one GPU, which quotas count before a GPU is chosen;
	// once placed, the shares taken count (UsageOn).
	//
	// With GPUs set too, the request is in its node's unit: a pod asking
	// for GPUs of ShareResource (nvidia.com/gpu: k) takes, on a GPU
	// time-sliced under that very name (GPU.InReplicas), Replicas replicas
	// of that one GPU, and GPUs whole GPUs on any other.
	Replicas int `json:"replicas,omitempty"`
	// GPUMemoryMiB is GPU memory for a share (with or without GPUMilli).
	GPUMemoryMiB int64 `json:"gpuMemoryMiB,omitempty"`
	// ShareResource is the device-plugin resource a share is asked
	// through (GPU.ShareResource); empty: any. On a request for whole
	// GPUs without Replicas it limits them to GPUs shared under it.
	ShareResource string `json:"shareResource,omitempty"`
	// MIGSlices asks for a MIG instance of that many compute slices
	// (MIGProfile names it, for example "3g.20gb").
	MIGSlices  int    `json:"migSlices,omitempty"`
	MIGProfile string `json:"migProfile,omitempty"`
	// GPUModels lists allowed GPU models; empty allows any.
	GPUModels []string `json:"gpuModels,omitempty"`
	// DeviceSet, when set, asks for GPUs through ResourceClaims: only
	// GPUs that belong to this set (GPU.DeviceSets) serve the request, and
	// its GPUs are whole GPUs (GPUs). Empty: the device plugin's GPUs,
	// never a ClaimOnly one.
	DeviceSet string `json:"deviceSet,omitempty"`
	// AllOfSet, with DeviceSet, asks for every GPU of the set on the node
	// the pod goes to, at least one and none of them taken (a claim's
	// allocationMode: All): a node whose set GPUs are not all free does
	// not take the pod. GPUs is then the most GPUs of the set any node
	// has (at least 1), what queues count before the pod is placed; once
	// placed it counts the GPUs it got (Placed).
	AllOfSet bool `json:"allOfSet,omitempty"`
	// FirstOf, when not empty, lists the ways the pod's claims may be
	// served, most preferred first (a claim's firstAvailable
	// subrequests): each a whole request, the same as this one but for
	// its GPUs (DeviceSet, GPUs, AllOfSet, MIGSlices, GPUMilli, ...),
	// whose own FirstOf is empty. The pod takes the first alternative that
	// places on some node, on the node it places best, and
	// Bind.Alternative says which; so on the node it gets, no earlier
	// alternative fits. Queues count the largest alternative before the
	// pod is placed (GPUMilliTotal), and the request's own GPU fields are
	// not read.
	FirstOf      []Request         `json:"firstOf,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	Tolerations  []Toleration      `json:"tolerations,omitempty"`
	// Namespace and Labels are the pod's, which other pods' affinity
	// terms and spread constraints select; Affinity and Spread are its own
	// (podaffinity.go).
	Namespace string             `json:"namespace,omitempty"`
	Labels    map[string]string  `json:"labels,omitempty"`
	Affinity  *PodAffinity       `json:"podAffinity,omitempty"`
	Spread    []SpreadConstraint `json:"spread,omitempty"`
	// Terminating is set on a running pod that is being deleted (its
	// deletionTimestamp is set): it holds all it holds until it is gone,
	// and other pods' affinity and anti-affinity terms and its own
	// anti-affinity still see it, but no spread constraint counts it
	// (kube-scheduler's PodTopologySpread skips such pods,
	// InterPodAffinity does not). A pending pod never has it.
	Terminating bool `json:"terminating,omitempty"`
	// NotPod is set on a running holding that is no pod: devices of a
	// ResourceClaim no pod on the node holds, the volumes a node's
	// VolumeAttachments attach. It takes what it asks but no slot of the
	// node's pod limit (Node.Allocatable's pods), which counts pods only.
	NotPod bool `json:"notPod,omitempty"`
	// Scalars is what the pod asks of every other resource of its node
	// (ephemeral-storage, hugepages-<size>, extended resources the fields
	// above do not model), in the node's unit, counted against
	// Node.Allocatable; HostPorts are the node ports its containers bind
	// (resources.go).
	Scalars   map[string]int64 `json:"scalars,omitempty"`
	HostPorts []HostPort       `json:"hostPorts,omitempty"`
	// Volumes is what the pod's volumes take that other pods' placements
	// change (volumes.go); nil: nothing.
	Volumes *PodVolumes `json:"volumes,omitempty"`
}

// Shared reports whether the request takes part of one GPU.
func (r *Request) Shared() bool {
	return r.GPUs == 0 && r.MIGSlices == 0 && (r.GPUMilli > 0 || r.GPUMemoryMiB > 0)
}

// GPUMilliTotal is the milli-GPU the request takes in all: for a request
// with alternatives (FirstOf), the most any of them takes.
func (r *Request) GPUMilliTotal() int64 {
	switch {
	case len(r.FirstOf) > 0:
		var most int64
		for k := range r.FirstOf {
			most = max(most, r.FirstOf[k].GPUMilliTotal())
		}
		return most
	case r.GPUs > 0:
		return int64(r.GPUs) * MilliPerGPU
	case r.MIGSlices > 0:
		return int64(r.MIGSlices) * MilliPerGPU / 7
	}
	return r.GPUMilli
}

// UsesGPU reports whether the request needs any GPU.
func (r *Request) UsesGPU() bool {
	return r.GPUs > 0 || r.MIGSlices > 0 || r.GPUMilli > 0 || r.GPUMemoryMiB > 0 || len(r.FirstOf) > 0
}

// Alt is the request that alternative k of r places: FirstOf[k] when r
// has alternatives, else r itself (k is 0 then).
func (r *Request) Alt(k int) *Request {
	if len(r.FirstOf) == 0 {
		return r
	}
	return &r.FirstOf[k]
}

// Pod is one member of a pod group.
type Pod struct {
	Name    string  `json:"name"`
	Role    string  `json:"role,omitempty"`
	Request Request `json:"request"`
	// Slice names the slice of its group's Topology the pod is in: its
	// sub-group (an LWS group, a JobSet's Job, a PyTorchJob's workers)
	// for slices by sub-group (SliceSize 0); for slices by size, the
	// sub-group and the pod's rank's slice within it, where every pod of
	// the group has a rank (else slices are counted in pod order).
	Slice string `json:"slice,omitempty"`
}

// PodGroup is a gang: at least MinMember of its pods run together or none
// do. A lone pod is a group of one.
type PodGroup struct {
	Name      string `json:"name"`
	Queue     string `json:"queue,omitempty"`
	Priority  int32  `json:"priority,omitempty"`
	MinMember int    `json:"minMember,omitempty"`
	// CreatedAt orders groups of equal priority (older first); any
	// monotonic unit works (the simulator uses trace seconds).
	CreatedAt int64 `json:"createdAt,omitempty"`
	Pods      []Pod `json:"pods"`
	// Preemptible groups may be evicted for others; the zero value (false)
	// means a group may be evicted only by a strictly higher priority in
	// its own queue or by reclaim of borrowed quota.
	NonPreemptible bool `json:"nonPreemptible,omitempty"`
	// NeverEvicts groups evict no one for themselves, neither preempting
	// nor reclaiming (their pods say preemptionPolicy: Never); they wait
	// for room instead.
	NeverEvicts bool `json:"neverEvicts,omitempty"`
	// MinRuntime is the least time, in Snapshot.Now's unit, the group runs
	// once placed before preemption or reclaim may evict it, from its
	// priority class; its allocations carry it (Allocation.MinRuntime).
	MinRuntime int64 `json:"minRuntime,omitempty"`
	// MinResources is the least the gang needs its queue to admit, for
	// example what its workload will grow to once started. A queue admits
	// the group only when its usage plus the larger of this and the pods'
	// requests, resource by resource, stays within its limit and every
	// ancestor's. Zero means the pods' requests alone.
	MinResources Resources `json:"minResources,omitzero"`
	// Placed counts the group's members that already run, are bound or
	// have finished: a gang needs only MinMember less these (Min).
	Placed int `json:"placed,omitempty"`
	// Topology, when set, places the gang by the network's topology
	// (topology.go).
	Topology *GangTopology `json:"topology,omitempty"`
	// Explain asks the core, should the group stay unplaced, to say node
	// by node why (Unplaced.Explained); it costs a look at every node.
	Explain bool `json:"explain,omitempty"`
	// Movable groups may be moved, once running, to make room for a gang
	// that waits only because free GPUs are scattered (defrag.go): their
	// workload restarts where it is moved (restartable, checkpointed).
	Movable bool `json:"movable,omitempty"`
}

// Min is how many of the group's waiting pods must be placed together:
// the one gang rule every driver of the core shares. A gang of MinMember
// (0: all its pods) with Placed members running, bound or finished needs
// MinMember - Placed more, at least one; a group whose MinMember is 0
// needs all its waiting pods. Never more than the pods that wait.
func (g *PodGroup) Min() int {
	n := len(g.Pods)
	if g.MinMember <= 0 {
		return n
	}
	return min(n, max(1, g.MinMember-g.Placed))
}

// GPUShare is the part of one GPU a pod holds.
type GPUShare struct {
	Index     int   `json:"index"`
	Milli     int64 `json:"milli"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	MIGSlices int   `json:"migSlices,omitempty"`
}

// Allocation is a running pod and what it holds.
type Allocation struct {
	Pod       string     `json:"pod"`
	Group     string     `json:"group"`
	Queue     string     `json:"queue,omitempty"`
	Priority  int32      `json:"priority,omitempty"`
	Node      string     `json:"node"`
	Request   Request    `json:"request"`
	GPUs      []GPUShare `json:"gpus,omitempty"`
	StartedAt int64      `json:"startedAt,omitempty"`
	// NonPreemptible allocations are never evicted.
	NonPreemptible bool `json:"nonPreemptible,omitempty"`
	// MinMember is the declared gang size of the pod's group (0: all its
	// pods), so that an evicted group waits again for its whole gang.
	MinMember int `json:"minMember,omitempty"`
	// Slice is the pod's slice (Pod.Slice) while it runs: the pods of its
	// slice still pending join it in its domain of the slice level.
	Slice string `json:"slice,omitempty"`
	// MinRuntime is the least time, in Snapshot.Now's unit, the pod's
	// group runs before preemption or reclaim may evict it, from its
	// priority class (PodGroup.MinRuntime); its queue's Queue.MinRuntime
	// applies as well, the larger of the two.
	MinRuntime int64 `json:"minRuntime,omitempty"`
	// LastCheckpoint is when the pod's workload last saved a checkpoint it
	// can resume from, in Snapshot.Now's unit; 0 when it never said. Work
	// since then (since StartedAt when later or unknown) is what evicting
	// it loses.
	LastCheckpoint int64 `json:"lastCheckpoint,omitempty"`
	// Movable is the pod's group's PodGroup.Movable.
	Movable bool `json:"movable,omitempty"`
}

// Usage is the quota vector of a running allocation: its request's on the
// GPUs it holds (Request.UsageOn).
func (a *Allocation) Usage() Resources { return a.Request.UsageOn(a.GPUs) }

// UsageOn is the quota vector of the request placed on shares: its
// Resources, but for a request counted in replicas (Replicas) the
// milli-GPU of the shares its GPUs give, which the node's sharing factor
// sets, and for an AllOfSet request the GPUs it got, in place of the
// estimates they are counted by while they wait. Every count of a placed
// pod goes through it, so that a queue's usage is the same in the cycle
// that places the pod as in the cycles after. r is one request to place
// (Alt), not one with alternatives.
func (r *Request) UsageOn(shares []GPUShare) Resources {
	use := r.Resources()
	switch {
	case r.AllOfSet:
		use.GPUMilli = int64(len(shares)) * MilliPerGPU
	case r.Replicas > 0 && len(shares) > 0:
		use.GPUMilli = 0
		for _, s := range shares {
			use.GPUMilli += s.Milli
		}
	}
	return use
}

// Resources is a vector of the resources quotas are kept in.
type Resources struct {
	MilliCPU  int64 `json:"milliCPU,omitempty"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	GPUMilli  int64 `json:"gpuMilli,omitempty"`
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.MilliCPU + o.MilliCPU, r.MemoryMiB + o.MemoryMiB, r.GPUMilli + o.GPUMilli}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{r.MilliCPU - o.MilliCPU, r.MemoryMiB - o.MemoryMiB, r.GPUMilli - o.GPUMilli}
}

// Max returns the larger of r and o in each component.
func (r Resources) Max(o Resources) Resources {
	return Resources{max(r.MilliCPU, o.MilliCPU), max(r.MemoryMiB, o.MemoryMiB), max(r.GPUMilli, o.GPUMilli)}
}

// Fits reports whether every component of r is <= the same one of o.
func (r Resources) Fits(o Resources) bool {
	return r.MilliCPU <= o.MilliCPU && r.MemoryMiB <= o.MemoryMiB && r.GPUMilli <= o.GPUMilli
}

// Resources is what the request takes in the vector queues count quotas
// in: its CPU, its memory and its milli-GPU in all (GPUMilliTotal).
func (r *Request) Resources() Resources {
	return Resources{r.MilliCPU, r.MemoryMiB, r.GPUMilliTotal()}
}

// Queue is a node of the queue hierarchy. Leaves hold workloads; parents
// act as cohorts whose children borrow each other's idle quota.
type Queue struct {
	Name   string `json:"name"`
	Parent string `json:"parent,omitempty"`
	// Guaranteed is always available to the queue (reclaimed from
	// borrowers when needed).
	Guaranteed Resources `json:"guaranteed,omitempty"`
	// Limit caps the queue's usage including borrowing; a zero component
	// means no limit for that resource.
	Limit Resources `json:"limit,omitempty"`
	// Weight divides idle capacity among siblings; 0 means 1. It is the
	// weight of every resource Weights leaves at 0.
	Weight float64 `json:"weight,omitempty"`
	// Priority orders the queue against its siblings: while a sibling of
	// higher priority has pending work that fits, it takes its turns
	// first; fair share orders siblings of equal priority.
	Priority int32 `json:"priority,omitempty"`
	// Weights overrides Weight per resource (the Queue API's weight of
	// cpu, memory and nvidia.com/gpu).
	Weights ResourceWeights `json:"weights,omitzero"`
	// NoPreemption keeps the queue's groups from evicting lower-priority
	// groups of the queue (the Queue API's spec.preemption: Never).
	NoPreemption bool `json:"noPreemption,omitempty"`
	// NoReclaim keeps the queue's groups from taking back its guarantee or
	// fair share from queues that borrowed it (spec.reclaim: Never).
	NoReclaim bool `json:"noReclaim,omitempty"`
	// UsageHalfLife, when positive, makes the queue's fair share follow
	// its usage over time (Snapshot.Usage): an average of its usage whose
	// weight halves every UsageHalfLife, in Snapshot.Now's unit, sets how
	// much of what is left over guarantees it gets against siblings that
	// also set one (spec.usageHalfLife).
	UsageHalfLife int64 `json:"usageHalfLife,omitempty"`
	// MinRuntime is the least time, in Snapshot.Now's unit, a group of the
	// queue (or of a queue below it) runs before preemption or reclaim may
	// evict it (spec.minRuntime).
	MinRuntime int64 `json:"minRuntime,omitempty"`
}

// QueueUsage is a queue's usage averaged over time: each resource's usage
// weighted by 2^(-age/UsageHalfLife) and normalised, so that a queue that
// has held r for long has r, as of At (Snapshot.Now's unit). The core
// returns it for every queue with a UsageHalfLife (Decisions.Usage) and
// reads it back from the next snapshot (Snapshot.Usage).
type QueueUsage struct {
	Queue     string  `json:"queue"`
	MilliCPU  float64 `json:"milliCPU,omitempty"`
	MemoryMiB float64 `json:"memoryMiB,omitempty"`
	GPUMilli  float64 `json:"gpuMilli,omitempty"`
	At        int64   `json:"at"`
}

// ResourceWeights is a queue's weight per resource; a zero field means the
// queue's Weight.
type ResourceWeights struct {
	MilliCPU  float64 `json:"milliCPU,omitempty"`
	MemoryMiB float64 `json:"memoryMiB,omitempty"`
	GPUMilli  float64 `json:"gpuMilli,omitempty"`
}

// DisruptionBudget bounds the evictions of one cycle.
type DisruptionBudget struct {
	// MaxEvictions is the cap on evicted pods per cycle; 0 means none may
	// be evicted, negative means unbounded.
	MaxEvictions int `json:"maxEvictions"`
}

// Snapshot is everything one cycle reads. The core never changes it.
//
// RunningByNode holds the running allocations, aligned with Nodes:
// RunningByNode[i] holds the allocations on Nodes[i]; nil means nothing
// runs. Whoever builds the snapshot never modifies a chunk slice once
// passed (an element or, through another slice, its backing array within
// its length): a chunk with the same length as in the previous snapshot
// and, when not empty, the same first element (the same address) is the
// same chunk, and the core skips that node without reading it. A node
// whose pods changed gets a new slice (Apply does so). A cycle thus costs
// what changed, not the cluster.
//
// In JSON a snapshot may list its running allocations in one array,
// "running", as snapshots written before RunningByNode did; reading one
// sorts them onto their nodes (UnmarshalJSON).
type Snapshot struct {
	Nodes         []Node           `json:"nodes"`
	RunningByNode [][]Allocation   `json:"runningByNode,omitempty"`
	Pending       []PodGroup       `json:"pending,omitempty"`
	Queues        []Queue          `json:"queues,omitempty"`
	Budget        DisruptionBudget `json:"budget"`
	// Holds are the preemptors waiting for their victims to exit, as the
	// last cycle returned them (Decisions.Holds); a driver passes them back
	// unchanged, or leaves one out to end it (an eviction was refused).
	Holds []Hold `json:"holds,omitempty"`
	// HoldTimeout is how long, in Now's unit, a hold waits for its
	// victims before its group competes afresh; 0 means no limit.
	HoldTimeout int64 `json:"holdTimeout,omitempty"`
	// Now is the snapshot time in the same unit as CreatedAt.
	Now int64 `json:"now,omitempty"`
	// Layouts is the hysteresis of MIG layout proposals for the nodes
	// that opt in (Node.MIG).
	Layouts LayoutPolicy `json:"layouts,omitzero"`
	// Usage is the time-averaged usage of the queues with a
	// UsageHalfLife, as the last cycle returned it (Decisions.Usage); a
	// driver passes it back unchanged. A queue missing from it starts
	// from its usage now.
	Usage []QueueUsage `json:"usage,omitempty"`
	// VictimsByAge orders the victims of equal priority newest first
	// alone, blind to the work they lose (LastCheckpoint): how victims were
	// chosen before checkpoints counted, kept to compare the two.
	VictimsByAge bool `json:"victimsByAge,omitempty"`
	// NodesMayBeAdded says a node autoscaler adds nodes for groups that
	// wait for room: a gang whose least need is above all the nodes'
	// capacity together then waits for room (UnplacedNoFit), which more
	// nodes cure, rather than being told it can never start
	// (UnplacedAboveCapacity).
	NodesMayBeAdded bool `json:"nodesMayBeAdded,omitempty"`
	// NodePools, with NodesMayBeAdded, are the node autoscaler's GPU
	// node pools, each with the GPUs it may still add by its limit; nil
	// sets no limit (none is known, or some pool has none). A gang whose
	// least need is above the GPUs of the nodes its pods' selectors admit
	// together with what the pools whose future nodes they admit may add
	// waits for the limits to change (UnplacedAboveNodeLimits), not for
	// capacity: the autoscaler would buy nodes for part of it and stop at
	// the limit, and the gang would never start.
	NodePools []NodePool `json:"nodePools,omitempty"`
	// Defrag bounds the moves the core may make to defragment (defrag.go);
	// its zero value makes none.
	Defrag DefragPolicy `json:"defrag,omitzero"`
}

// NodePool is one of the node autoscaler's GPU node pools: the labels
// its future nodes will carry (matched against requests' NodeSelector as a
// node's are) and the GPUs it may still add within its limit.
type NodePool struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Unlimited: the pool sets no GPU limit; AddGPUMilli is then unread.
	Unlimited bool `json:"unlimited,omitempty"`
	// AddGPUMilli is the physical GPUs, in thousandths, of the whole
	// nodes the pool may still add: its limit less the nodes it has, at
	// least 0.
	AddGPUMilli int64 `json:"addGPUMilli,omitempty"`
}

// Hold is a group whose placement needed evictions, waiting for the
// evicted pods to exit: where the core placed it (Plan), the victims that
// still run and when the wait began (Since, in Snapshot.Now's unit). While
// it waits the core keeps the room the victims free for it, out of reach of
// every other group; once they are gone it binds the plan first in the
// cycle, and a plan that no longer fits, or a wait past
// Snapshot.HoldTimeout, sends the group back to compete afresh.
type Hold struct {
	Group   string   `json:"group"`
	Plan    []Bind   `json:"plan"`
	Victims []string `json:"victims"`
	Since   int64    `json:"since"`
	// Moved is set on the hold of a group moved to defragment (Move): its
	// victims are its own pods where they ran, and its plan is where
	// they run again.
	Moved bool `json:"moved,omitempty"`
}

// CapacityOf sums the nodes' CPU, memory and GPU.
func CapacityOf(nodes []Node) Resources {
	var c Resources
	for i := range nodes {
		c.MilliCPU += nodes[i].MilliCPU
		c.MemoryMiB += nodes[i].MemoryMiB
		for _, g := range nodes[i].GPUs {
			c.GPUMilli += g.Capacity()
		}
	}
	return c
}

// AllRunning yields every running allocation, node by node.
func (s *Snapshot) AllRunning() iter.Seq[*Allocation] {
	return func(yield func(*Allocation) bool) {
		for _, chunk := range s.RunningByNode {
			for i := range chunk {
				if !yield(&chunk[i]) {
					return
				}
			}
		}
	}
}

// ByNode sorts running onto nodes, in the form of
// Snapshot.RunningByNode: out[i] holds, in their order in running, the
// allocations whose Node is nodes[i].Name, in a slice of their own. It is
// nil when running is empty, and an error when an allocation names no
// node of nodes.
func ByNode(nodes []Node, running []Allocation) ([][]Allocation, error) {
	if len(running) == 0 {
		return nil, nil
	}
	index := make(map[string]int, len(nodes))
	for i := range nodes {
		index[nodes[i].Name] = i
	}
	out := make([][]Allocation, len(nodes))
	for _, a := range running {
		n, ok := index[a.Node]
		if !ok {
			return nil, fmt.Errorf("pod %q runs on node %q, which is not among the snapshot's nodes", a.Pod, a.Node)
		}
		out[n] = append(out[n], a)
	}
	return out, nil
}

// UnmarshalJSON reads a snapshot, with its running allocations either by
// node ("runningByNode") or in one array ("running", the form written
// before), which it sorts onto the nodes with ByNode. A snapshot that sets
// both is refused.
func (s *Snapshot) UnmarshalJSON(data []byte) error {
	type plain Snapshot // the same fields, without this method
	var in struct {
		plain
		Running []Allocation `json:"running,omitempty"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	if len(in.Running) > 0 {
		if in.RunningByNode != nil {
			return errors.New("reading snapshot: both running and runningByNode are set: set one or the other")
		}
		byNode, err := ByNode(in.Nodes, in.Running)
		if err != nil {
			return fmt.Errorf("reading snapshot: running: %w", err)
		}
		in.RunningByNode = byNode
	}
	*s = Snapshot(in.plain)
	return nil
}

// Bind places one pod of a group on a node and GPUs.
type Bind struct {
	Pod       string     `json:"pod"`
	Group     string     `json:"group"`
	Node      string     `json:"node"`
	NodeIndex int        `json:"nodeIndex"`
	GPUs      []GPUShare `json:"gpus,omitempty"`
	// Alternative is which of the pod's Request.FirstOf the GPUs serve
	// (0 for a request without alternatives).
	Alternative int `json:"alternative,omitempty"`
	// Volumes is, for each of the pod's Request.Volumes.Claims in order,
	// the PV it binds, or "" for a volume provisioned on Node.
	Volumes []string `json:"volumes,omitempty"`
}

// EvictDisruption is the Eviction.Reason of the pods of a group with a
// pod on a Disrupted node: the group is evicted whole, or only its pods
// on such nodes when it is elastic and keeps its MinMember without them
// (Eviction.Shrink), and not for another group (Eviction.For is empty).
const EvictDisruption = "disruption"

// Eviction removes a running pod to make room.
type Eviction struct {
	Pod   string `json:"pod"`
	Group string `json:"group"`
	Node  string `json:"node"`
	// For is the group the room was made for; Reason says why
	// ("preempt" within a queue, "reclaim" across queues, or
	// EvictDefragment for a move, EvictDisruption for no group).
	For    string `json:"for"`
	Reason string `json:"reason"`
	// Shrink is set when the pod's group keeps running without it: an
	// elastic group gives up members above its MinMember before it is
	// evicted whole (elastic.go), and loses only its members on a node
	// going away while the rest keep its MinMember (EvictDisruption).
	Shrink bool `json:"shrink,omitempty"`
}

// EvictDefragment is the Eviction.Reason of the pods of a moved group.
const EvictDefragment = "defragment"

// Why a group was not placed (Unplaced.Code).
const (
	// UnplacedNoFit: no placement for the gang on the nodes as they are.
	UnplacedNoFit = "DoesNotFit"
	// UnplacedQueueLimit: the queue, or an ancestor, would exceed its limit.
	UnplacedQueueLimit = "QueueLimit"
	// UnplacedPreemptionDisabled: the group would fit by preempting
	// lower-priority groups of its queue, which the queue forbids.
	UnplacedPreemptionDisabled = "PreemptionDisabled"
	// UnplacedReclaimDisabled: the group would fit by reclaiming from
	// queues that borrowed, which its queue forbids.
	UnplacedReclaimDisabled = "ReclaimDisabled"
	// UnplacedWaitingForVictims: the group is placed once the pods
	// evicted for it exit (Decisions.Holds).
	UnplacedWaitingForVictims = "WaitingForPreemption"
	// UnplacedAboveQueueLimit: what the group needs admitted exceeds the
	// limit of its queue, or of an ancestor, on its own: it can never
	// start there, however idle the queue (Unplaced.Queue, Unplaced.Need).
	UnplacedAboveQueueLimit = "ExceedsQueueLimit"
	// UnplacedAboveCapacity: the least the group can start with (its
	// minMember smallest pods) exceeds what every node of the cluster has
	// together (Unplaced.Need, Unplaced.Capacity).
	UnplacedAboveCapacity = "ExceedsClusterCapacity"
	// UnplacedBadTopology: the group's topology means nothing
	// (GangTopology.Check says which field); it is never placed as it is.
	UnplacedBadTopology = "InvalidTopology"
	// UnplacedNoDomain: no domain of the gang's required level (or of
	// its slice level) has room for it; Unplaced.Level names the level,
	// Unplaced.Domain the domain that has the most.
	UnplacedNoDomain = "NoTopologyDomain"
	// UnplacedFragmentedDomain: no domain of the gang's required level
	// has room for it, but Unplaced.Domain would, were the pods listed in
	// Unplaced.Movable moved (they are preemptible, of lower priority or
	// borrowed); nothing moves them yet.
	UnplacedFragmentedDomain = "TopologyDomainFragmented"
	// UnplacedMissingMembers: fewer of the gang's pods exist (waiting,
	// placed or finished) than its MinMember; it waits for the rest to be
	// created and is never placed in part (Unplaced.Missing counts them).
	UnplacedMissingMembers = "NotEnoughPods"
	// UnplacedVictimsTooYoung: the group would fit by preemption or
	// reclaim, but only by evicting groups younger than their minimum
	// runtime (PodGroup.MinRuntime, Queue.MinRuntime); it waits for them
	// to reach it, the first at Unplaced.OfAge.
	UnplacedVictimsTooYoung = "VictimsBelowMinRuntime"
	// UnplacedNodesComing: the group fits nowhere as the nodes are, but
	// would fit once the coming nodes (Node.Coming) named in
	// Unplaced.Coming register their GPUs, taken in the order the core
	// gives groups their turns: it waits for them, and is bound to none
	// of them before then.
	UnplacedNodesComing = "NodesComing"
	// UnplacedAboveNodeLimits: the least the group can start with is
	// above the most GPUs the nodes may have together, those the node
	// autoscaler may still add by its node pools' limits included
	// (Snapshot.NodePools; Unplaced.Need, Unplaced.Capacity): no node is
	// bought for part of it.
	UnplacedAboveNodeLimits = "ExceedsNodePoolLimits"
)

// What a waiting group waits for (Unplaced.Wait): whether more nodes
// would start it. A driver holds back the groups that wait for anything
// but capacity, so that an autoscaler, which buys nodes for the pods a
// scheduler calls unschedulable, buys none for them.
const (
	// WaitCapacity: more nodes, or more room on them, would start the
	// group: nothing fits it as the nodes are (UnplacedNoFit, the
	// topology codes), it needs more than all nodes have
	// (UnplacedAboveCapacity), or it would fit only by evictions its
	// queue or its pods forbid.
	WaitCapacity = "Capacity"
	// WaitQuota: its queue, or an ancestor, does not admit it
	// (UnplacedQueueLimit, UnplacedAboveQueueLimit): nodes would sit idle.
	WaitQuota = "Quota"
	// WaitGang: members of the gang are still missing
	// (UnplacedMissingMembers).
	WaitGang = "GangMembers"
	// WaitVictims: the group is placed and waits for the pods evicted for
	// it to exit (UnplacedWaitingForVictims).
	WaitVictims = "Preemption"
	// WaitSpec: the group can never start as it is written
	// (UnplacedBadTopology); its spec must change.
	WaitSpec = "Spec"
	// WaitComing: nodes already bought, yet to register their GPUs, would
	// start it (UnplacedNodesComing): more nodes would not.
	WaitComing = "NodesComing"
	// WaitNodeLimits: more nodes would start it, but the node pools'
	// limits let the autoscaler add too few (UnplacedAboveNodeLimits):
	// the limits must change.
	WaitNodeLimits = "NodePoolLimits"
)

// Unplaced records a pending group the cycle could not place: Code says
// why (one of the Unplaced* constants), Reason the same in words.
type Unplaced struct {
	Group  string `json:"group"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	// Wait says what the group waits for, one of the Wait* constants:
	// WaitCapacity alone is what more nodes would cure. The core sets it
	// from Code; a driver acts on it and never works it out itself.
	Wait string `json:"wait,omitempty"`
	// Missing is, for UnplacedMissingMembers, how many more pods the gang
	// needs before it can be placed.
	Missing int `json:"missing,omitempty"`
	// OfAge is, for UnplacedVictimsTooYoung, when (Snapshot.Now's unit)
	// the first of the victims the group would fit by reaches its
	// minimum runtime.
	OfAge int64 `json:"ofAge,omitempty"`
	// Explained is set when the core also says where the group's first
	// pod was refused: Filtered counts the nodes each filter refused
	// (placement.Filter* reasons) out of Nodes, and Placeable is how many
	// of the group's pods would fit at once.
	Explained bool          `json:"explained,omitempty"`
	Nodes     int           `json:"nodes,omitempty"`
	Filtered  []FilterCount `json:"filtered,omitempty"`
	Placeable int           `json:"placeable,omitempty"`
	// For UnplacedAboveQueueLimit and UnplacedAboveCapacity: Need is what
	// the group needs, Queue and Limit the queue whose limit it exceeds,
	// Capacity the cluster's.
	Need     Resources `json:"need,omitzero"`
	Queue    string    `json:"queue,omitempty"`
	Limit    Resources `json:"limit,omitzero"`
	Capacity Resources `json:"capacity,omitzero"`
	// For UnplacedNoDomain and UnplacedFragmentedDomain: Level is the
	// topology level's key; Domain the domain of it with room for the
	// most of the gang (UnplacedNoDomain), or the one that would have
	// room for all of it were the running pods in Movable moved
	// (UnplacedFragmentedDomain: at most 16 named, the rest counted in
	// MovableMore).
	Level       string   `json:"level,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Movable     []string `json:"movable,omitempty"`
	MovableMore int      `json:"movableMore,omitempty"`
	// Coming names, for UnplacedNodesComing, the coming nodes the group
	// waits for, in node order.
	Coming []string `json:"coming,omitempty"`
	// Kept is, for a group that waited DefragPolicy.DrainAfter for whole
	// nodes (UnplacedNoFit), the nodes this cycle kept free of every
	// other group for it, one per pod of it that needs a whole node, and
	// what stands on each; Reason says the same in words. Empty when no
	// node was kept for it.
	Kept []KeptNode `json:"kept,omitempty"`
}

// KeptNode is a node kept free for a waiting group (Unplaced.Kept): no
// other group is placed there while what stands on it leaves. While
// Fixed is above 0 the group waits for that work to end; then the
// Movable work is moved off, as the move budget allows (its Unsaved part
// once it checkpoints), and the group is held in the room it leaves.
type KeptNode struct {
	Node string `json:"node"`
	// Fixed is the milli-GPU held there by work that may not move:
	// groups that did not opt in to moves or may not be evicted, and
	// room held for other waiting groups.
	Fixed int64 `json:"fixedGPUMilli,omitempty"`
	// Movable is the milli-GPU held there by groups that opted in to
	// moves.
	Movable int64 `json:"movableGPUMilli,omitempty"`
	// Unsaved is the part of Movable held by groups further from their
	// restart point than DefragPolicy.MaxLostWork: they are moved off
	// once they checkpoint.
	Unsaved int64 `json:"unsavedGPUMilli,omitempty"`
}

// FilterCount is how many nodes one filter refused.
type FilterCount struct {
	Filter string `json:"filter"`
	Nodes  int    `json:"nodes"`
}

// QueueStatus is a queue as the cycle left it: its usage after the
// cycle's decisions, its fair share given the demand the cycle saw, and
// its guarantee.
type QueueStatus struct {
	Name       string    `json:"name"`
	Usage      Resources `json:"usage"`
	FairShare  Resources `json:"fairShare"`
	Guaranteed Resources `json:"guaranteed,omitzero"`
}

// PhaseTiming is how long one phase of the cycle took, in nanoseconds.
type PhaseTiming struct {
	Phase string `json:"phase"`
	Nanos int64  `json:"nanos"`
}

// Decisions is what a cycle returns. Binds of one group are adjacent. A
// group whose placement needs evictions is not bound in the cycle that
// evicts for it: it comes out as a hold, bound by a later cycle once its
// victims are gone.
type Decisions struct {
	Binds     []Bind     `json:"binds,omitempty"`
	Evictions []Eviction `json:"evictions,omitempty"`
	// Holds are the preemptors still waiting for their victims, new and
	// old: the next snapshot's Holds.
	Holds    []Hold     `json:"holds,omitempty"`
	Unplaced []Unplaced `json:"unplaced,omitempty"`
	// Layouts are the MIG layouts proposed for idle GPUs of nodes that
	// opt in, for pending pods no GPU could serve as it is.
	Layouts []LayoutProposal `json:"layouts,omitempty"`
	// Moves are the groups this cycle moved to defragment: their pods are
	// among Evictions (EvictDefragment) and their new places among Holds
	// (Hold.Moved). The next snapshot's Defrag.Recent gains them.
	Moves []Move `json:"moves,omitempty"`
	// Queues is every queue's status after the cycle.
	Queues []QueueStatus `json:"queues,omitempty"`
	// Usage is the time-averaged usage of every queue with a
	// UsageHalfLife, as of the snapshot's Now: the next snapshot's Usage.
	Usage   []QueueUsage  `json:"usage,omitempty"`
	Timings []PhaseTiming `json:"timings,omitempty"`
}

// GPUMilliGuaranteed is the queue's guaranteed milli-GPU.
func (q Queue) GPUMilliGuaranteed() int64 { return q.Guaranteed.GPUMilli }
