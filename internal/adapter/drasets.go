package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// deviceSetPrefix names the core's device sets (model.GPU.DeviceSets).
const deviceSetPrefix = "claims-"

// deviceSet is the devices that satisfy one shape of claims: which GPUs of
// each node (aligned with the builder's nodes) pass their device classes'
// and requests' selectors, and how many devices the claims ask for in all.
// The core places a pod's claims as that many whole GPUs of the set.
type deviceSet struct {
	name  string
	masks []uint64
	count int
	// shareMilli and shareMemMiB, when the claims ask for capacity, make
	// the set's one device a share of one GPU (dracapacity.go).
	shareMilli, shareMemMiB int64
	share                   bool
	// err is why the claims cannot be allocated anywhere, with the index
	// of the claim it concerns among those the set was made for.
	err      string
	errClaim int
	errCode  string
	// wholeReqs and migReqs count the requests served by whole GPUs and
	// by MIG devices; migField and migClaim name the last of the latter.
	wholeReqs, migReqs int
	migField           string
	migClaim           int
	// migSlices, when not 0, says the claims ask for one MIG device,
	// served by GPUs in MIG mode: the core places it as that many of the
	// GPU's compute slices (the smallest device that passes the
	// selectors), migProfile names it.
	migSlices  int
	migProfile string
}

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

// claimSpecKey is a claim's device requests and constraints, which decide
// the devices it may get; its config does not.
type claimSpecKey struct {
	Requests    []resourceapi.DeviceRequest    `json:"r"`
	Constraints []resourceapi.DeviceConstraint `json:"c,omitempty"`
}

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
	if set.err != "" {
		cl := pc.alloc[set.errClaim]
		return nil, badInput(set.errCode, "ResourceClaim %s: %s", claimKey(cl), set.err)
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
		return &deviceSet{err: fmt.Sprintf("encoding its requests: %v", err), errCode: "InvalidResourceClaim"}
	}
	key := string(raw)
	if s := b.dra.sets[key]; s != nil {
		return s
	}
	s := evalDeviceSet(b.nodes, specs, c.dra.classes, c.dra.cel)
	b.dra.nextSet++
	s.name = deviceSetPrefix + strconv.Itoa(b.dra.nextSet)
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

// evalDeviceSet finds, on every node, the GPUs that satisfy the claims'
// requests: of gpuplane's driver, passing the selectors of the request's
// DeviceClass and then its own, evaluated with the structured allocator's
// CEL environment and cache, and not tainted against the request (a
// NoSchedule or NoExecute device taint none of its tolerations tolerates),
// all as the allocator judges them with dra.Features (featureAllows). A
// selector that fails on a device (a missing attribute, a type error)
// fails the set, as it fails kube-scheduler's allocation. A request that
// needs a feature dra.Features has off (refusedFeature), or of all
// devices, fails it too.
func evalDeviceSet(nodes []*nodeInfo, specs []claimSpecKey, classes map[string]*resourceapi.DeviceClass, cache *dracel.Cache) *deviceSet {
	s := &deviceSet{masks: make([]uint64, len(nodes))}
	fail := func(claim int, code, format string, args ...any) *deviceSet {
		return &deviceSet{errClaim: claim, errCode: code, err: fmt.Sprintf(format, args...)}
	}
	ctx := context.Background()
	for ci, spec := range specs {
		for ri, r := range spec.Requests {
			field := fmt.Sprintf("spec.devices.requests[%d] (%q)", ri, r.Name)
			if refusal := dra.RefusedFeature(&r); refusal != "" {
				return fail(ci, "UnsupportedClaim", refusal, field)
			}
			x := r.Exactly
			if x.AllocationMode == resourceapi.DeviceAllocationModeAll {
				// The allocator serves All; the core places a count.
				return fail(ci, "UnsupportedClaim", "%s.exactly.allocationMode: All is not supported by gpuplane-scheduler: use ExactCount with a count", field)
			}
			count := x.Count
			if count < 0 {
				// The API server refuses it; a claim read from anywhere
				// else is held to the same rule before the allocator,
				// which sizes its results by it, sees it.
				return fail(ci, "InvalidResourceClaim", "%s.exactly.count: %d: ask for at least 1 device", field, count)
			}
			if count == 0 {
				count = 1
			}
			if x.Capacity != nil && len(x.Capacity.Requests) > 0 {
				milli, mem, err := capacityShare(field, x, count)
				if err == nil && (s.count > 0 || len(spec.Requests) > 1 || len(specs) > 1) {
					err = fmt.Errorf("%s.exactly.capacity: a capacity request must be the pod's only device request: gpuplane-scheduler places it as a share of one GPU", field)
				}
				if err != nil {
					return fail(ci, "UnsupportedClaim", "%v", err)
				}
				s.share, s.shareMilli, s.shareMemMiB = true, milli, mem
			}
			if count > maxClaimGPUs || int64(s.count)+count > maxClaimGPUs {
				return fail(ci, "TooManyDevices", "%s.exactly.count: the pod's claims ask for more than %d devices, more than a node publishes: ask for fewer", field, maxClaimGPUs)
			}
			s.count += int(count)
			class := classes[x.DeviceClassName]
			if class == nil {
				return fail(ci, "DeviceClassNotFound", "%s.exactly.deviceClassName: DeviceClass %q does not exist: create it or name an existing one", field, x.DeviceClassName)
			}
			var progs []dracel.CompilationResult
			for si, sel := range class.Spec.Selectors {
				if sel.CEL == nil {
					continue
				}
				res := cache.GetOrCompile(sel.CEL.Expression)
				if res.Error != nil {
					return fail(ci, "InvalidSelector", "DeviceClass %s: spec.selectors[%d]: %v", class.Name, si, res.Error)
				}
				progs = append(progs, res)
			}
			nClass := len(progs)
			for si, sel := range x.Selectors {
				if sel.CEL == nil {
					continue
				}
				res := cache.GetOrCompile(sel.CEL.Expression)
				if res.Error != nil {
					return fail(ci, "InvalidSelector", "%s.exactly.selectors[%d]: %v", field, si, res.Error)
				}
				progs = append(progs, res)
			}
			// match reports whether a device passes the class's and the
			// request's selectors and taints, or the set's failure.
			match := func(d *draDevice, node string) (bool, *deviceSet) {
				if !dra.DeviceAllowed(d.dev, x.Tolerations) {
					return false, nil
				}
				in := dracel.Device{Driver: apidra.DriverName, Attributes: d.dev.Attributes, Capacity: d.dev.Capacity, AllowMultipleAllocations: d.dev.AllowMultipleAllocations}
				for pi, prog := range progs {
					match, _, err := prog.DeviceMatches(ctx, in)
					if err != nil {
						where := fmt.Sprintf("%s.exactly.selectors[%d]", field, pi-nClass)
						if pi < nClass {
							where = fmt.Sprintf("DeviceClass %s: spec.selectors[%d]", class.Name, pi)
						}
						return false, fail(ci, "SelectorFailed", "%s: %q fails on device %s of node %s: %v: fix the expression (guard an attribute a device may lack with has(...))",
							where, prog.Expression, d.name, node, err)
					}
					if !match {
						return false, nil
					}
				}
				return true, nil
			}
			// Whole GPUs that pass make the request one for whole GPUs;
			// only when none does anywhere, its MIG devices count.
			var whole, mig []uint64
			var smallest *draDevice
			for ni, n := range nodes {
				for g, d := range n.devs {
					if d == nil || g >= 64 {
						continue
					}
					if d.dev != nil {
						ok, bad := match(d, n.node.Name)
						if bad != nil {
							return bad
						}
						if ok {
							if whole == nil {
								whole = make([]uint64, len(nodes))
							}
							whole[ni] |= 1 << uint(g)
						}
						continue
					}
					for _, mg := range d.migs {
						ok, bad := match(mg, n.node.Name)
						if bad != nil {
							return bad
						}
						if !ok {
							continue
						}
						if mig == nil {
							mig = make([]uint64, len(nodes))
						}
						mig[ni] |= 1 << uint(g)
						if smallest == nil || mg.slices < smallest.slices {
							smallest = mg
						}
					}
				}
			}
			switch {
			case whole != nil:
				for ni := range whole {
					s.masks[ni] |= whole[ni]
				}
				s.wholeReqs++
			case mig != nil:
				if count != 1 {
					return fail(ci, "UnsupportedClaim", "%s.exactly.count: the request selects MIG devices and asks for %d: gpuplane-scheduler places one MIG device per pod's claims; ask for count 1", field, count)
				}
				for ni := range mig {
					s.masks[ni] |= mig[ni]
				}
				if s.migSlices == 0 || smallest.slices < s.migSlices {
					s.migSlices, s.migProfile = smallest.slices, smallest.profile
				}
				s.migReqs++
				s.migField, s.migClaim = field, ci
			}
		}
	}
	if s.migReqs > 0 && s.migReqs+s.wholeReqs > 1 {
		return fail(s.migClaim, "UnsupportedClaim", "%s selects MIG devices beside other requests: gpuplane-scheduler places a pod's claims as whole GPUs or as one MIG device, not both", s.migField)
	}
	return s
}

// withDeviceSets returns the GPUs of node i with the device sets in use
// they belong to; the node's own slice when none.
func withDeviceSets(gpus []model.GPU, i int, sets []*deviceSet) []model.GPU {
	var out []model.GPU
	for _, s := range sets {
		m := s.masks[i]
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
				out[g].DeviceSets += s.name
			}
		}
	}
	if out == nil {
		return gpus
	}
	return out
}
