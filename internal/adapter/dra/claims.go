package dra

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Claims is what a pending pod asks through ResourceClaims: the claims
// still to allocate, the claims already allocated (shared with other pods)
// that it is to be added to, the node those pin it to ("" for none), and
// the device set the core places the claims to allocate in. Nothing in it
// is written once made.
type Claims struct {
	Alloc  []*resourceapi.ResourceClaim
	Shared []*resourceapi.ResourceClaim
	Node   string
	Set    *DeviceSet
	// ERClaim, when not nil, says the claim is the one made for the pod's
	// extended resources (extended.go).
	ERClaim *ERClaim
}

// Wait says why a pending pod's claims cannot be placed now: a reason
// code (CamelCase) and a message naming the claim and the field.
type Wait struct {
	Reason, Msg string
}

func wait(reason, format string, args ...any) *Wait {
	return &Wait{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Pending is a pending pod as claim resolution reads it: the pod, its
// key (namespace/name), its request as the adapter converted it, and the
// extended resource a DeviceClass may serve for it (ClaimableResource).
type Pending struct {
	Pod      *corev1.Pod
	Key      string
	Req      *model.Request
	Extended corev1.ResourceName
	// AdminNamespace says the pod's namespace carries the label
	// resource.kubernetes.io/admin-access=true (AdminNamespace): its
	// claims may ask for admin access.
	AdminNamespace bool
}

// AdminNamespace reports whether a namespace's labels allow its claims
// admin access to devices, as the API server judges it.
func AdminNamespace(labels map[string]string) bool {
	return labels[resourceapi.DRAAdminNamespaceLabelKey] == "true"
}

// adminRequest names the first request of a claim that asks for admin
// access, "" when none does.
func adminRequest(cl *resourceapi.ResourceClaim) string {
	for ri, r := range cl.Spec.Devices.Requests {
		if x := r.Exactly; x != nil && x.AdminAccess != nil && *x.AdminAccess {
			return fmt.Sprintf("spec.devices.requests[%d] (%q).exactly.adminAccess", ri, r.Name)
		}
	}
	return ""
}

// deviceSetPrefix names the core's device sets (model.GPU.DeviceSets).
const deviceSetPrefix = "claims-"

// resolveClaims reads a pending pod's claims from the state. A claim not
// made yet, missing, being deleted, reserved for too many pods, or whose
// requests the scheduler cannot satisfy (an unknown DeviceClass, a
// selector that fails) makes the pod wait, with the reason.
func (m *Memo) resolveClaims(s *State, nodes *Nodes, pp Pending) (*Claims, *Wait) {
	p := pp.Pod
	if pp.Req.UsesGPU() {
		return nil, wait("MixedGPURequest", "the pod asks for GPUs both through the device plugin (nvidia.com/*) and through spec.resourceClaims: ask through one of them")
	}
	pc := &Claims{}
	names := PodClaimNames(p)
	var specs []ClaimSpec
	for i, rc := range p.Spec.ResourceClaims {
		field := lazyField{i, rc}
		if names[i] == "" {
			return nil, wait("WaitingForResourceClaim", "%s: the ResourceClaim from template %q is not made yet (kube-controller-manager's resourceclaim controller makes it)", field, deref(rc.ResourceClaimTemplateName))
		}
		key := p.Namespace + "/" + names[i]
		cl := s.claims[key]
		if cl == nil {
			return nil, wait("ResourceClaimNotFound", "%s: ResourceClaim %s does not exist: create it or name an existing one", field, key)
		}
		if cl.DeletionTimestamp != nil {
			return nil, wait("ResourceClaimDeleted", "%s: ResourceClaim %s is being deleted", field, key)
		}
		if names[i] != deref(rc.ResourceClaimName) && !ownedBy(cl, p) {
			return nil, wait("ResourceClaimNotOwned", "%s: ResourceClaim %s was not made for this pod (its owner is another pod)", field, key)
		}
		alloc := cl.Status.Allocation
		if f := s.inflight[key]; f != nil && f.alloc != nil {
			alloc = f.alloc
		}
		if alloc == nil {
			if f := adminRequest(cl); f != "" && !pp.AdminNamespace {
				// The API server refuses such a claim; one made before the
				// label was removed is held to the same rule.
				return nil, wait("AdminAccessNotAllowed", "ResourceClaim %s: %s: namespace %s is not labelled %s=true, which admin access to devices needs",
					key, f, p.Namespace, resourceapi.DRAAdminNamespaceLabelKey)
			}
			pc.Alloc = append(pc.Alloc, cl)
			specs = append(specs, ClaimSpec{Requests: cl.Spec.Devices.Requests, Constraints: cl.Spec.Devices.Constraints})
			continue
		}
		if len(cl.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize {
			return nil, wait("ResourceClaimFull", "%s: ResourceClaim %s is reserved for %d consumers, the most it can be", field, key, len(cl.Status.ReservedFor))
		}
		node := AllocationNode(alloc)
		if node == "" {
			return nil, wait("UnsupportedClaim", "%s: ResourceClaim %s is allocated without a single node (a network-attached device), which gpuplane-scheduler does not place pods for", field, key)
		}
		if pc.Node != "" && pc.Node != node {
			return nil, wait("ClaimsOnDifferentNodes", "the pod's ResourceClaims are allocated on different nodes (%s and %s): no node has them all", pc.Node, node)
		}
		pc.Node = node
		pc.Shared = append(pc.Shared, cl)
	}
	if len(specs) == 0 {
		return pc, nil
	}
	var set *DeviceSet
	if len(pc.Alloc) == 1 {
		// One claim to allocate, the common case: its set is kept with
		// the claim object it was made from.
		m.resetSets(s, nodes)
		cl := pc.Alloc[0]
		if c, ok := m.claimSets[claimKey(cl)]; ok && c.claim == cl {
			set = c.set
		} else {
			set = m.deviceSet(s, nodes, specs)
			if len(m.claimSets) >= maxClaimSets {
				clear(m.claimSets)
			}
			m.claimSets[claimKey(cl)] = claimSetMemo{claim: cl, set: set}
		}
	} else {
		set = m.deviceSet(s, nodes, specs)
	}
	if set.Err != "" {
		cl := pc.Alloc[set.ErrClaim]
		return nil, wait(set.ErrCode, "ResourceClaim %s: %s", claimKey(cl), set.Err)
	}
	pc.Set = set
	return pc, nil
}

// PodClaimNames returns the claims a pod names, one per
// spec.resourceClaims entry: the claim's name, the name of the claim made
// from its template (status.resourceClaimStatuses), or "" while that claim
// is not made yet.
func PodClaimNames(p *corev1.Pod) []string {
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

// lazyField names a pod's spec.resourceClaims entry in a message, worded
// only when the message is.
type lazyField struct {
	i  int
	rc corev1.PodResourceClaim
}

func (f lazyField) String() string {
	return "spec.resourceClaims[" + strconv.Itoa(f.i) + "] (" + strconv.Quote(f.rc.Name) + ")"
}

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
