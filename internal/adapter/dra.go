package adapter

import (
	"cmp"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// maxClaimGPUs bounds the GPUs one node may publish to the scheduler
// through ResourceSlices (dra.MaxGPUs).
const maxClaimGPUs = dra.MaxGPUs

// draDevice is one GPU a node publishes in a ResourceSlice of gpuplane's
// driver (dra.Device).
type draDevice = dra.Device

// draCache is the DRA part of the cluster cache: the ResourceSlices of
// gpuplane's driver that name a node, the DeviceClasses, the
// ResourceClaims, and the claim allocations this scheduler decided and has
// not yet seen come back from the informer (the in-flight allocations, as
// kube-scheduler's assume cache keeps them): every snapshot counts both on
// their nodes, so no device is given twice. Read and written under the
// cluster cache's lock.
type draCache struct {
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
	// controls them (draext.go).
	erClaimByPod map[types.UID]string
	// refused are the pods whose claims refused the core's last choice,
	// by pod key (choiceRefusal).
	refused map[string]choiceRefusal
	// version is bumped when slices or classes change: which devices a
	// claim's selectors pick may then differ.
	version int
	// cel compiles selectors once, for the device sets and the allocator.
	cel *dracel.Cache
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

func newDRACache() *draCache {
	return &draCache{slices: map[string]*resourceapi.ResourceSlice{}, byNode: map[string]map[string]*resourceapi.ResourceSlice{}, classes: map[string]*resourceapi.DeviceClass{},
		claims: map[string]*resourceapi.ResourceClaim{}, claimNode: map[string]string{}, onNode: map[string]map[string]bool{},
		inflight: map[string]*inflightClaim{}, refused: map[string]choiceRefusal{}, erClaimByPod: map[types.UID]string{}, cel: dracel.NewCache(celCacheSize, dra.CELFeatures)}
}

func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// upsertSlice records a ResourceSlice of gpuplane's driver for a node and
// refreshes that node's GPUs.
func (c *clusterCache) upsertSlice(s *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.dra.slices[s.Name]
	if old != nil {
		c.dropSlice(old)
	}
	if s.Spec.Driver != apidra.DriverName || s.Spec.NodeName == nil {
		if old != nil {
			c.refreshDRANode(*old.Spec.NodeName)
		}
		return
	}
	c.dra.slices[s.Name] = s
	node := *s.Spec.NodeName
	if c.dra.byNode[node] == nil {
		c.dra.byNode[node] = map[string]*resourceapi.ResourceSlice{}
	}
	c.dra.byNode[node][s.Name] = s
	if old != nil && *old.Spec.NodeName != node {
		c.refreshDRANode(*old.Spec.NodeName)
	}
	c.refreshDRANode(node)
}

// dropSlice forgets a stored slice. Caller holds mu.
func (c *clusterCache) dropSlice(old *resourceapi.ResourceSlice) {
	delete(c.dra.slices, old.Name)
	node := *old.Spec.NodeName
	delete(c.dra.byNode[node], old.Name)
	if len(c.dra.byNode[node]) == 0 {
		delete(c.dra.byNode, node)
	}
}

func (c *clusterCache) deleteSlice(s *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.dra.slices[s.Name]; old != nil {
		c.dropSlice(old)
		c.refreshDRANode(*old.Spec.NodeName)
	}
}

func (c *clusterCache) upsertClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.classes[dc.Name] = dc
	c.dra.version++
	c.poke()
}

func (c *clusterCache) deleteClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dra.classes, dc.Name)
	c.dra.version++
	c.poke()
}

// upsertClaim records a claim; the nodes its allocation was and is on are
// recomputed, and an in-flight allocation the informer now shows is done.
func (c *clusterCache) upsertClaim(cl *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := claimKey(cl)
	c.dra.claims[key] = cl
	if f := c.dra.inflight[key]; f != nil && cl.Status.Allocation != nil && reservedAll(cl, f.pods) {
		delete(c.dra.inflight, key)
	}
	if uid, ok := isERClaim(cl); ok {
		c.dra.erClaimByPod[uid] = key
		// The allocation made in flight before the claim existed is the
		// claim's once the informer shows it allocated and reserved.
		mem := erClaimMemKey(cl.Namespace, uid)
		if f := c.dra.inflight[mem]; f != nil && cl.Status.Allocation != nil && reservedAll(cl, f.pods) {
			delete(c.dra.inflight, mem)
			c.placeClaim(mem)
		}
	}
	c.placeClaim(key)
	c.poke()
}

func (c *clusterCache) deleteClaim(cl *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := claimKey(cl)
	delete(c.dra.claims, key)
	delete(c.dra.inflight, key)
	if uid, ok := isERClaim(cl); ok && c.dra.erClaimByPod[uid] == key {
		delete(c.dra.erClaimByPod, uid)
	}
	c.placeClaim(key)
	c.poke()
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
// flight) is on and marks the nodes it left and joined for recomputing.
// Caller holds mu.
func (c *clusterCache) placeClaim(key string) {
	node := ""
	if f := c.dra.inflight[key]; f != nil {
		node = f.node
	} else if cl := c.dra.claims[key]; cl != nil && cl.Status.Allocation != nil {
		node = allocationNode(cl.Status.Allocation)
	}
	old := c.dra.claimNode[key]
	if old == node {
		if node != "" {
			c.dirty[node] = true
		}
		return
	}
	if old != "" {
		delete(c.dra.onNode[old], key)
		c.dirty[old] = true
		delete(c.dra.claimNode, key)
	}
	if node != "" {
		if c.dra.onNode[node] == nil {
			c.dra.onNode[node] = map[string]bool{}
		}
		c.dra.onNode[node][key] = true
		c.dra.claimNode[key] = node
		c.dirty[node] = true
	}
}

// allocationNode is the node an allocation's node selector names (the
// structured allocator writes metadata.name in a match field), "" when it
// names none.
func allocationNode(a *resourceapi.AllocationResult) string {
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

// refreshDRANode recomputes a node's GPUs after its slices changed. Caller
// holds mu.
func (c *clusterCache) refreshDRANode(node string) {
	c.dra.version++
	c.poke()
	ni := c.nodes[node]
	if ni == nil {
		return
	}
	m, devs := c.withDRA(ni.node, ni.base)
	if m.Topology != nil && ni.base.Topology == nil {
		// The topology describes the GPUs the node's slices publish.
		delete(c.nodeWarnings, node)
	}
	if !sameModelNode(&ni.m, &m) {
		c.nodesVersion++
		c.dirty[node] = true
	}
	c.nodes[node] = &nodeInfo{node: ni.node, base: ni.base, m: m, devs: devs, replicas: ni.replicas}
}

// withDRA returns a node's model with the GPUs its ResourceSlices publish,
// and the devices aligned with the model's GPUs (nil where a GPU has none).
// A node whose device plugin advertises GPUs keeps them, and a device
// whose index attribute names one of them is that GPU: one GPU, whichever
// way a pod asks for it. A node without them gets one claim-only GPU per
// device, ordered by index, with the NVLink topology of the node's
// gpuplane.io/gpu-topology annotation when it describes exactly those
// devices, indexed 0 to n-1. Devices of type gpu are whole GPUs; devices
// of type mig are grouped by their parentIndex into one GPU in MIG mode
// (dra.MIGDevices). Caller holds mu.
func (c *clusterCache) withDRA(n *corev1.Node, base model.Node) (model.Node, []*draDevice) {
	node := n.Name
	// The newest generation of each pool wins, as for the allocator.
	gen := map[string]int64{}
	for _, s := range c.dra.byNode[node] {
		gen[s.Spec.Pool.Name] = max(gen[s.Spec.Pool.Name], s.Spec.Pool.Generation)
	}
	if len(gen) == 0 {
		return base, nil
	}
	type indexed struct {
		idx int64
		d   *draDevice
	}
	var found []indexed
	var current []*resourceapi.ResourceSlice
	for _, s := range c.dra.byNode[node] {
		if s.Spec.Pool.Generation != gen[s.Spec.Pool.Name] {
			continue
		}
		current = append(current, s)
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if t := d.Attributes[apidra.AttrType]; t.StringValue == nil || *t.StringValue != apidra.TypeGPU {
				continue
			}
			idx := int64(-1)
			if a := d.Attributes[apidra.AttrIndex]; a.IntValue != nil && *a.IntValue >= 0 {
				idx = *a.IntValue
			}
			found = append(found, indexed{idx: idx, d: &draDevice{Pool: s.Spec.Pool.Name, Name: d.Name, Dev: d}})
		}
	}
	migs := dra.MIGDevices(current)
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
		devs := make([]*draDevice, len(base.GPUs))
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
	if len(found) > maxClaimGPUs {
		found = found[:maxClaimGPUs]
	}
	m.GPUs = make([]model.GPU, len(found))
	devs := make([]*draDevice, len(found))
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
		m.Topology = topologyOf(t)
	}
	return m, devs
}

// deviceShare returns the GPU share a node's device stands for
// (dra.DeviceShare).
func (ni *nodeInfo) deviceShare(driver, pool, name string) (model.GPUShare, bool) {
	return dra.DeviceShare(ni.devs, ni.m.GPUs, driver, pool, name)
}

// claimShares returns, for the node, the GPU shares each pod holds through
// the claims allocated there, and the claims no pod there holds (allocated
// for pods not yet bound, or left allocated), with their shares. A claim
// several pods share counts once, for the first of them by key. Caller
// holds mu.
func (c *clusterCache) claimShares(ni *nodeInfo) (byPod map[string][]model.GPUShare, orphans map[string][]model.GPUShare) {
	keys := c.dra.onNode[ni.node.Name]
	if len(keys) == 0 {
		return nil, nil
	}
	onNode := c.onNode[ni.node.Name]
	byUID := make(map[types.UID]string, len(onNode))
	for k, pi := range onNode {
		byUID[pi.pod.UID] = k
	}
	for key := range keys {
		var alloc *resourceapi.AllocationResult
		var owners []string
		if f := c.dra.inflight[key]; f != nil {
			alloc = f.alloc
			for _, p := range f.pods {
				if _, ok := onNode[p.key]; ok {
					owners = append(owners, p.key)
				}
			}
		}
		cl := c.dra.claims[key]
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
			if sh, ok := ni.deviceShare(r.Driver, r.Pool, r.Device); ok {
				if sh.MIGSlices == 0 {
					sh = resultShare(ni, sh.Index, &r) // a share of a GPU allocated more than once
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

// claimAllocationPrefix names the core's allocations that stand for a
// claim holding devices for no pod on its node.
const claimAllocationPrefix = "claim/"

// orphanAllocations are the core's allocations of a node's claims no pod
// there holds: never evicted, counted in no queue.
func orphanAllocations(node string, orphans map[string][]model.GPUShare) []model.Allocation {
	out := make([]model.Allocation, 0, len(orphans))
	for key, sh := range orphans {
		name := claimAllocationPrefix + key
		out = append(out, model.Allocation{Pod: name, Group: name, Node: node, Request: claimRequest(sh), GPUs: sh, NonPreemptible: true})
	}
	slices.SortFunc(out, func(a, b model.Allocation) int { return cmp.Compare(a.Pod, b.Pod) })
	return out
}

// claimRequest is the GPU part of the request that claims' shares stand
// for: their whole GPUs, and the compute slices of their MIG devices.
func claimRequest(sh []model.GPUShare) model.Request {
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

// podClaimNames returns the claims a pod names, one per
// spec.resourceClaims entry: the claim's name, the name of the claim made
// from its template (status.resourceClaimStatuses), or "" while that claim
// is not made yet.
func podClaimNames(p *corev1.Pod) []string {
	out := make([]string, len(p.Spec.ResourceClaims))
	for i, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			out[i] = *rc.ResourceClaimName
			continue
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.Name == rc.Name && st.ResourceClaimName != nil {
				out[i] = *st.ResourceClaimName
			}
		}
	}
	return out
}

// fieldOf names a pod's spec.resourceClaims entry in messages.
func fieldOf(i int, rc corev1.PodResourceClaim) string {
	return "spec.resourceClaims[" + strconv.Itoa(i) + "] (" + strconv.Quote(rc.Name) + ")"
}
