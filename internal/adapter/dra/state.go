package dra

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// State is what gpuplane-scheduler knows of DRA between cycles: the
// ResourceSlices of gpuplane's driver that name a node, the
// DeviceClasses, the ResourceClaims, and the claim allocations this
// scheduler decided and has not yet seen come back from the informer (the
// in-flight allocations, as kube-scheduler's assume cache keeps them),
// with the indexes by node, and the refusals of the core's choices
// (refusal.go). Every snapshot counts claims and in-flight allocations on
// their nodes, so no device is given twice.
//
// The informers' handlers feed it (UpsertSlice, UpsertClass,
// UpsertClaim and their deletions), the snapshot builder reads it (NodeGPUs,
// ClaimShares, and the claims of pending pods through a Memo), and the
// binder allocates through it (AllocateChoice, Forget). A State is not
// safe for concurrent use: its owner (package adapter's cluster cache)
// calls it under its own lock.
type State struct {
	slices map[string]*resourceapi.ResourceSlice // by name
	// byNode indexes the slices by the node they name.
	byNode  map[string]map[string]*resourceapi.ResourceSlice
	classes map[string]*resourceapi.DeviceClass
	claims  map[string]*resourceapi.ResourceClaim // namespace/name
	// claimNode is the node an allocated claim's devices are on.
	claimNode map[string]string
	// onNode indexes the claims allocated (or in flight) on each node.
	onNode map[string]map[string]bool
	// inflight are the allocations and reservations this scheduler
	// computed and is writing, by claim.
	inflight map[string]*inflightClaim
	// erClaimByPod indexes the extended-resource claims by the pod that
	// controls them (extended.go).
	erClaimByPod map[types.UID]string
	// refused are the pods whose claims refused the core's last choice,
	// by pod key (refusal).
	refused map[string]refusal
	// version is bumped when slices or classes change: which devices a
	// claim's selectors pick may then differ.
	version int
	// cel compiles selectors once, for the device sets and the allocator.
	cel *dracel.Cache
	// touched is told of every node whose claims' allocations changed:
	// the allocations of its running pods are to be recomputed.
	touched func(node string)
}

// celCacheSize is how many compiled CEL selectors the scheduler keeps
// (claims of one workload repeat the same few).
const celCacheSize = 256

// inflightClaim is a claim allocation or reservation not yet seen in the
// informer: the allocation (nil when the claim was already allocated and
// only reserved), its node, and the pods it is being reserved for.
type inflightClaim struct {
	alloc *resourceapi.AllocationResult
	node  string
	pods  []consumer
}

type consumer struct {
	key string
	uid types.UID
}

// NewState returns an empty State; touched (not nil) is told, under the
// caller's lock, of each node whose claims' allocations changed.
func NewState(touched func(node string)) *State {
	return &State{slices: map[string]*resourceapi.ResourceSlice{}, byNode: map[string]map[string]*resourceapi.ResourceSlice{}, classes: map[string]*resourceapi.DeviceClass{},
		claims: map[string]*resourceapi.ResourceClaim{}, claimNode: map[string]string{}, onNode: map[string]map[string]bool{},
		inflight: map[string]*inflightClaim{}, refused: map[string]refusal{}, erClaimByPod: map[types.UID]string{},
		cel: dracel.NewCache(celCacheSize, CELFeatures), touched: touched}
}

// Version changes whenever slices or classes change: device sets made
// before are stale.
func (s *State) Version() int { return s.version }

// Claim returns the claim the informer shows under namespace/name, nil
// for none.
func (s *State) Claim(key string) *resourceapi.ResourceClaim { return s.claims[key] }

// InFlight is how many claim allocations and reservations this scheduler
// made that the informer does not show yet.
func (s *State) InFlight() int { return len(s.inflight) }

// ClaimsOn is how many claims hold devices (allocated or in flight) on a
// node.
func (s *State) ClaimsOn(node string) int { return len(s.onNode[node]) }

// UpsertSlice records a ResourceSlice; one of another driver or that
// names no node is forgotten. It returns the nodes whose GPUs are to be
// made again (NodeGPUs): the node the slice names, and the one it named
// before.
func (s *State) UpsertSlice(sl *resourceapi.ResourceSlice) []string {
	var nodes []string
	old := s.slices[sl.Name]
	if old != nil {
		s.dropSlice(old)
	}
	if sl.Spec.Driver != apidra.DriverName || sl.Spec.NodeName == nil {
		if old != nil {
			nodes = append(nodes, *old.Spec.NodeName)
		}
		s.version += len(nodes)
		return nodes
	}
	s.slices[sl.Name] = sl
	node := *sl.Spec.NodeName
	if s.byNode[node] == nil {
		s.byNode[node] = map[string]*resourceapi.ResourceSlice{}
	}
	s.byNode[node][sl.Name] = sl
	if old != nil && *old.Spec.NodeName != node {
		nodes = append(nodes, *old.Spec.NodeName)
	}
	nodes = append(nodes, node)
	s.version += len(nodes)
	return nodes
}

// dropSlice forgets a stored slice.
func (s *State) dropSlice(old *resourceapi.ResourceSlice) {
	delete(s.slices, old.Name)
	node := *old.Spec.NodeName
	delete(s.byNode[node], old.Name)
	if len(s.byNode[node]) == 0 {
		delete(s.byNode, node)
	}
}

// DeleteSlice forgets a ResourceSlice and returns the node whose GPUs are
// to be made again, none when the slice was not recorded.
func (s *State) DeleteSlice(sl *resourceapi.ResourceSlice) []string {
	old := s.slices[sl.Name]
	if old == nil {
		return nil
	}
	s.dropSlice(old)
	s.version++
	return []string{*old.Spec.NodeName}
}

// UpsertClass records a DeviceClass.
func (s *State) UpsertClass(dc *resourceapi.DeviceClass) {
	s.classes[dc.Name] = dc
	s.version++
}

// DeleteClass forgets a DeviceClass.
func (s *State) DeleteClass(dc *resourceapi.DeviceClass) {
	delete(s.classes, dc.Name)
	s.version++
}

// UpsertClaim records a claim; the nodes its allocation was and is on are
// touched, and an in-flight allocation the informer now shows (allocated
// and reserved for every pod it was being reserved for) is done.
func (s *State) UpsertClaim(cl *resourceapi.ResourceClaim) {
	key := claimKey(cl)
	s.claims[key] = cl
	if f := s.inflight[key]; f != nil && cl.Status.Allocation != nil && reservedAll(cl, f.pods) {
		delete(s.inflight, key)
	}
	if uid, ok := isERClaim(cl); ok {
		s.erClaimByPod[uid] = key
		// The allocation made in flight before the claim existed is the
		// claim's once the informer shows it allocated and reserved.
		mem := erClaimMemKey(cl.Namespace, uid)
		if f := s.inflight[mem]; f != nil && cl.Status.Allocation != nil && reservedAll(cl, f.pods) {
			delete(s.inflight, mem)
			s.placeClaim(mem)
		}
	}
	s.placeClaim(key)
}

// DeleteClaim forgets a claim and its allocation in flight.
func (s *State) DeleteClaim(cl *resourceapi.ResourceClaim) {
	key := claimKey(cl)
	delete(s.claims, key)
	delete(s.inflight, key)
	if uid, ok := isERClaim(cl); ok && s.erClaimByPod[uid] == key {
		delete(s.erClaimByPod, uid)
	}
	s.placeClaim(key)
}

// SlimSlice is what the State reads of a ResourceSlice, for the
// informer's cache: all of a node's slice of gpuplane's driver; of any
// other, only its metadata and where it is, since the scheduler allocates
// only gpuplane's devices.
func SlimSlice(sl *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	if sl.Spec.Driver == apidra.DriverName && sl.Spec.NodeName != nil {
		return sl
	}
	return &resourceapi.ResourceSlice{TypeMeta: sl.TypeMeta, ObjectMeta: sl.ObjectMeta,
		Spec: resourceapi.ResourceSliceSpec{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool, NodeName: sl.Spec.NodeName}}
}

// SlimClaim drops, in place, what the State never reads of a claim for
// the informer's cache: the drivers' per-device status (network data,
// conditions), the node's business. The allocation and the consumers
// stay.
func SlimClaim(cl *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	cl.Status.Devices = nil
	return cl
}

// reservedAll reports whether every consumer is in the claim's
// status.reservedFor.
func reservedAll(cl *resourceapi.ResourceClaim, pods []consumer) bool {
	for _, p := range pods {
		if !slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.uid }) {
			return false
		}
	}
	return true
}

// placeClaim indexes a claim on the node its allocation (informer or in
// flight) is on and touches the nodes it left and joined.
func (s *State) placeClaim(key string) {
	node := ""
	if f := s.inflight[key]; f != nil {
		node = f.node
	} else if cl := s.claims[key]; cl != nil && cl.Status.Allocation != nil {
		node = AllocationNode(cl.Status.Allocation)
	}
	old := s.claimNode[key]
	if old == node {
		if node != "" {
			s.touched(node)
		}
		return
	}
	if old != "" {
		delete(s.onNode[old], key)
		if len(s.onNode[old]) == 0 {
			delete(s.onNode, old) // a node gone for good leaves nothing behind
		}
		s.touched(old)
		delete(s.claimNode, key)
	}
	if node != "" {
		if s.onNode[node] == nil {
			s.onNode[node] = map[string]bool{}
		}
		s.onNode[node][key] = true
		s.claimNode[key] = node
		s.touched(node)
	}
}

// AllocationNode is the node an allocation's node selector names (the
// structured allocator writes metadata.name in a match field), "" when it
// names none.
func AllocationNode(a *resourceapi.AllocationResult) string {
	if a.NodeSelector == nil {
		return ""
	}
	for _, t := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
		for _, e := range t.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

// NodeView is one node as the State reads it: the Node, its GPUs in the
// core's model, and their devices, aligned (NodeGPUs made both).
type NodeView struct {
	Node *corev1.Node
	GPUs []model.GPU
	Devs []*Device
}

// NodeGPUs returns a node's model with the GPUs its ResourceSlices
// publish, and the devices aligned with the model's GPUs (nil where a GPU
// has none). A node whose device plugin advertises GPUs (base) keeps
// them, and a device whose index attribute names one of them is that GPU:
// one GPU, whichever way a pod asks for it. A node without them gets one
// claim-only GPU per device, ordered by index, with the NVLink topology
// of the node's gpuplane.io/gpu-topology annotation (made by topology)
// when it describes exactly those devices, indexed 0 to n-1. Devices of
// type gpu are whole GPUs; devices of type mig are grouped by their
// parentIndex into one GPU in MIG mode (MIGDevices).
func (s *State) NodeGPUs(n *corev1.Node, base model.Node, topology func(*gpunode.Topology) *gpu.Topology) (model.Node, []*Device) {
	node := n.Name
	// The newest generation of each pool wins, as for the allocator.
	gen := map[string]int64{}
	for _, sl := range s.byNode[node] {
		gen[sl.Spec.Pool.Name] = max(gen[sl.Spec.Pool.Name], sl.Spec.Pool.Generation)
	}
	if len(gen) == 0 {
		return base, nil
	}
	type indexed struct {
		idx int64
		d   *Device
	}
	var found []indexed
	var current []*resourceapi.ResourceSlice
	for _, sl := range s.byNode[node] {
		if sl.Spec.Pool.Generation != gen[sl.Spec.Pool.Name] {
			continue
		}
		current = append(current, sl)
		for i := range sl.Spec.Devices {
			d := &sl.Spec.Devices[i]
			if t := d.Attributes[apidra.AttrType]; t.StringValue == nil || *t.StringValue != apidra.TypeGPU {
				continue
			}
			idx := int64(-1)
			if a := d.Attributes[apidra.AttrIndex]; a.IntValue != nil && *a.IntValue >= 0 {
				idx = *a.IntValue
			}
			found = append(found, indexed{idx: idx, d: &Device{Pool: sl.Spec.Pool.Name, Name: d.Name, Dev: d}})
		}
	}
	migs := MIGDevices(current)
	for idx, d := range migs {
		if !slices.ContainsFunc(found, func(f indexed) bool { return f.idx == idx }) {
			found = append(found, indexed{idx: idx, d: d})
		}
	}
	slices.SortFunc(found, func(a, b indexed) int {
		if a.idx < 0 != (b.idx < 0) {
			return cmp.Compare(b.idx, a.idx)
		}
		return cmp.Or(cmp.Compare(a.idx, b.idx), cmp.Compare(a.d.Pool, b.d.Pool), cmp.Compare(a.d.Name, b.d.Name))
	})
	m := base
	if len(base.GPUs) > 0 {
		devs := make([]*Device, len(base.GPUs))
		for _, f := range found {
			if f.idx < 0 || f.idx >= int64(len(devs)) || devs[f.idx] != nil {
				continue
			}
			// A GPU in MIG mode serves MIG devices only where the device
			// plugin's node says it is in MIG mode too.
			if (f.d.Dev == nil) == (base.GPUs[f.idx].MIGSlices > 0) {
				devs[f.idx] = f.d
			}
		}
		return m, devs
	}
	if len(found) > MaxGPUs {
		found = found[:MaxGPUs]
	}
	m.GPUs = make([]model.GPU, len(found))
	devs := make([]*Device, len(found))
	for i, f := range found {
		g := model.GPU{Index: i, ClaimOnly: true}
		dev := f.d.Dev
		if dev == nil {
			// A GPU in MIG mode: any size of instance its counters fit
			// (dynamic MIG), named after its largest device.
			g.MIGSlices = f.d.Slices
			dev = f.d.MIGs[len(f.d.MIGs)-1].Dev
		}
		if p := dev.Attributes[apidra.AttrProductName]; p.StringValue != nil {
			g.Model = *p.StringValue
		}
		if q, ok := dev.Capacity[apidra.CapacityMemory]; ok && q.Value.Sign() > 0 {
			g.MemoryMiB = q.Value.Value() >> 20
		}
		m.GPUs[i], devs[i] = g, f.d
	}
	inOrder := true
	for i, f := range found {
		inOrder = inOrder && f.idx == int64(i)
	}
	if t, err := gpunode.ParseTopology(n.Annotations[gpunode.TopologyAnnotation]); err == nil && t != nil && t.GPUs == len(found) && inOrder {
		m.Topology = topology(t)
	}
	return m, devs
}

// ClaimShares returns, for a node, the GPU shares each pod holds through
// the claims allocated there, and the claims no pod there holds (allocated
// for pods not yet bound, or left allocated), with their shares. byUID
// names the pods holding the node by UID, onNode says whether a pod (by
// key) holds it. A claim several pods share counts once, for the first of
// them by key.
func (s *State) ClaimShares(ni NodeView, byUID map[types.UID]string, onNode func(key string) bool) (byPod map[string][]model.GPUShare, orphans map[string][]model.GPUShare) {
	keys := s.onNode[ni.Node.Name]
	if len(keys) == 0 {
		return nil, nil
	}
	for key := range keys {
		var alloc *resourceapi.AllocationResult
		var owners []string
		if f := s.inflight[key]; f != nil {
			alloc = f.alloc
			for _, p := range f.pods {
				if onNode(p.key) {
					owners = append(owners, p.key)
				}
			}
		}
		cl := s.claims[key]
		if cl != nil {
			if alloc == nil {
				alloc = cl.Status.Allocation
			}
			for _, r := range cl.Status.ReservedFor {
				if k, ok := byUID[r.UID]; ok && r.Resource == "pods" {
					owners = append(owners, k)
				}
			}
		}
		if alloc == nil {
			continue
		}
		var shares []model.GPUShare
		for _, r := range alloc.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue // admin access holds no share of the device
			}
			if sh, ok := DeviceShare(ni.Devs, ni.GPUs, r.Driver, r.Pool, r.Device); ok {
				if sh.MIGSlices == 0 {
					sh = ResultShare(&ni.GPUs[sh.Index], sh.Index, &r) // a share of a GPU allocated more than once
				}
				shares = append(shares, sh)
			}
		}
		if len(shares) == 0 {
			continue
		}
		if len(owners) == 0 {
			if orphans == nil {
				orphans = map[string][]model.GPUShare{}
			}
			orphans[key] = shares
			continue
		}
		if byPod == nil {
			byPod = map[string][]model.GPUShare{}
		}
		first := slices.Min(owners)
		byPod[first] = append(byPod[first], shares...)
	}
	for _, sh := range byPod {
		slices.SortFunc(sh, func(a, b model.GPUShare) int { return cmp.Compare(a.Index, b.Index) })
	}
	return byPod, orphans
}

// ClaimAllocationPrefix names the core's allocations that stand for a
// claim holding devices for no pod on its node.
const ClaimAllocationPrefix = "claim/"

// OrphanAllocations are the core's allocations of a node's claims no pod
// there holds (ClaimShares' orphans): never evicted, counted in no queue.
func OrphanAllocations(node string, orphans map[string][]model.GPUShare) []model.Allocation {
	out := make([]model.Allocation, 0, len(orphans))
	for key, sh := range orphans {
		name := ClaimAllocationPrefix + key
		req := ClaimRequest(sh)
		req.NotPod = true
		out = append(out, model.Allocation{Pod: name, Group: name, Node: node, Request: req, GPUs: sh, NonPreemptible: true})
	}
	slices.SortFunc(out, func(a, b model.Allocation) int { return cmp.Compare(a.Pod, b.Pod) })
	return out
}

// ClaimRequest is the GPU part of the request that claims' shares stand
// for: their whole GPUs, and the compute slices of their MIG devices.
func ClaimRequest(sh []model.GPUShare) model.Request {
	var r model.Request
	for _, s := range sh {
		if s.MIGSlices > 0 {
			r.MIGSlices += s.MIGSlices
		} else {
			r.GPUs++
		}
	}
	return r
}
