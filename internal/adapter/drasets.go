package adapter

import (
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// podClaims is what a pending pod asks through ResourceClaims: the claims
// still to allocate, the claims already allocated (shared with other pods)
// that it is to be added to, and the node those pin it to ("" for none).
type podClaims struct {
	alloc  []*resourceapi.ResourceClaim
	shared []*resourceapi.ResourceClaim
	node   string
	set    *deviceSet
	// erClaim, when not nil, says the claim is the one made for the pod's
	// extended resources (draext.go).
	erClaim *extendedResourceClaim
}

// deviceSet is the devices that satisfy one shape of claims
// (dra.DeviceSet); claimSpecKey a claim's requests and constraints
// (dra.ClaimSpec).
type (
	deviceSet    = dra.DeviceSet
	claimSpecKey = dra.ClaimSpec
)

// deviceSetPrefix names the core's device sets (model.GPU.DeviceSets).
const deviceSetPrefix = "claims-"

// resolveClaims reads a pending pod's claims from the cache. A claim not
// made yet, missing, being deleted, reserved for too many pods, or whose
// requests the scheduler cannot satisfy (an unknown DeviceClass, a
// selector that fails) makes the pod wait, with the reason. Caller holds
// c.mu.
func (b *builder) resolveClaims(c *clusterCache, pi *podInfo) (*podClaims, *BadInputError) {
	p := pi.pod
	if pi.req.UsesGPU() {
		return nil, badInput("MixedGPURequest", "the pod asks for GPUs both through the device plugin (nvidia.com/*) and through spec.resourceClaims: ask through one of them")
	}
	pc := &podClaims{}
	names := podClaimNames(p)
	var specs []claimSpecKey
	for i, rc := range p.Spec.ResourceClaims {
		field := lazyField{i, rc}
		if names[i] == "" {
			return nil, badInput("WaitingForResourceClaim", "%s: the ResourceClaim from template %q is not made yet (kube-controller-manager's resourceclaim controller makes it)", field, deref(rc.ResourceClaimTemplateName))
		}
		key := p.Namespace + "/" + names[i]
		cl := c.dra.claims[key]
		if cl == nil {
			return nil, badInput("ResourceClaimNotFound", "%s: ResourceClaim %s does not exist: create it or name an existing one", field, key)
		}
		if cl.DeletionTimestamp != nil {
			return nil, badInput("ResourceClaimDeleted", "%s: ResourceClaim %s is being deleted", field, key)
		}
		if names[i] != deref(rc.ResourceClaimName) && !ownedBy(cl, p) {
			return nil, badInput("ResourceClaimNotOwned", "%s: ResourceClaim %s was not made for this pod (its owner is another pod)", field, key)
		}
		alloc := cl.Status.Allocation
		if f := c.dra.inflight[key]; f != nil && f.alloc != nil {
			alloc = f.alloc
		}
		if alloc == nil {
			pc.alloc = append(pc.alloc, cl)
			specs = append(specs, claimSpecKey{Requests: cl.Spec.Devices.Requests, Constraints: cl.Spec.Devices.Constraints})
			continue
		}
		if len(cl.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize {
			return nil, badInput("ResourceClaimFull", "%s: ResourceClaim %s is reserved for %d consumers, the most it can be", field, key, len(cl.Status.ReservedFor))
		}
		node := allocationNode(alloc)
		if node == "" {
			return nil, badInput("UnsupportedClaim", "%s: ResourceClaim %s is allocated without a single node (a network-attached device), which gpuplane-scheduler does not place pods for", field, key)
		}
		if pc.node != "" && pc.node != node {
			return nil, badInput("ClaimsOnDifferentNodes", "the pod's ResourceClaims are allocated on different nodes (%s and %s): no node has them all", pc.node, node)
		}
		pc.node = node
		pc.shared = append(pc.shared, cl)
	}
	if len(specs) == 0 {
		return pc, nil
	}
	var set *deviceSet
	if len(pc.alloc) == 1 {
		// One claim to allocate, the common case: its set is kept with
		// the claim object it was made from.
		b.resetSets(c)
		cl := pc.alloc[0]
		if m, ok := b.dra.claimSets[claimKey(cl)]; ok && m.claim == cl {
			set = m.set
		} else {
			set = b.deviceSet(c, specs)
			if len(b.dra.claimSets) >= maxClaimSets {
				clear(b.dra.claimSets)
			}
			b.dra.claimSets[claimKey(cl)] = claimSetMemo{claim: cl, set: set}
		}
	} else {
		set = b.deviceSet(c, specs)
	}
	if set.Err != "" {
		cl := pc.alloc[set.ErrClaim]
		return nil, badInput(set.ErrCode, "ResourceClaim %s: %s", claimKey(cl), set.Err)
	}
	pc.set = set
	return pc, nil
}

// lazyField names a pod's spec.resourceClaims entry in a message, worded
// only when the message is.
type lazyField struct {
	i  int
	rc corev1.PodResourceClaim
}

func (f lazyField) String() string { return fieldOf(f.i, f.rc) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ownedBy reports whether a claim made from a template belongs to the pod.
func ownedBy(cl *resourceapi.ResourceClaim, p *corev1.Pod) bool {
	for _, o := range cl.OwnerReferences {
		if o.UID == p.UID {
			return true
		}
	}
	return false
}

// deviceSet returns the device set of a list of claim specs, evaluated
// once per shape while slices and classes stay the same. Caller holds
// c.mu.
func (b *builder) deviceSet(c *clusterCache, specs []claimSpecKey) *deviceSet {
	b.resetSets(c)
	raw, err := json.Marshal(specs)
	if err != nil {
		return &deviceSet{Err: fmt.Sprintf("encoding its requests: %v", err), ErrCode: "InvalidResourceClaim"}
	}
	key := string(raw)
	if s := b.dra.sets[key]; s != nil {
		return s
	}
	s := dra.EvalDeviceSet(b.dra.nodeDevices(b.nodes), specs, c.dra.classes, c.dra.cel)
	b.dra.nextSet++
	s.Name = deviceSetPrefix + strconv.Itoa(b.dra.nextSet)
	if len(b.dra.sets) >= maxDeviceSets {
		clear(b.dra.sets)
	}
	b.dra.sets[key] = s
	return s
}

// resetSets forgets the device sets once slices, classes or nodes
// changed. Caller holds c.mu.
func (b *builder) resetSets(c *clusterCache) {
	if b.dra.version != c.dra.version || b.dra.nodes != b.nodesVersion || b.dra.sets == nil {
		b.dra.sets = map[string]*deviceSet{}
		b.dra.claimSets = map[string]claimSetMemo{}
		b.dra.erSets = map[string]erMemo{}
		b.dra.exact = nil
		b.dra.devices = nil
		b.dra.version, b.dra.nodes = c.dra.version, b.nodesVersion
	}
}

// claimSetMemo is the device set of one claim object.
type claimSetMemo struct {
	claim *resourceapi.ResourceClaim
	set   *deviceSet
}

// maxDeviceSets and maxClaimSets bound the device sets kept between
// cycles, by shape and by claim.
const (
	maxDeviceSets = 1024
	maxClaimSets  = 1 << 17
)

// withDeviceSets returns the GPUs of node i with the device sets in use
// they belong to; the node's own slice when none.
func withDeviceSets(gpus []model.GPU, i int, sets []*deviceSet) []model.GPU {
	var out []model.GPU
	for _, s := range sets {
		m := s.Masks[i]
		if m == 0 {
			continue
		}
		if out == nil {
			out = make([]model.GPU, len(gpus))
			for g := range gpus {
				out[g] = gpus[g]
				out[g].DeviceSets = ""
			}
		}
		for g := range out {
			if g < 64 && m&(1<<uint(g)) != 0 {
				if out[g].DeviceSets != "" {
					out[g].DeviceSets += ","
				}
				out[g].DeviceSets += s.Name
			}
		}
	}
	if out == nil {
		return gpus
	}
	return out
}
