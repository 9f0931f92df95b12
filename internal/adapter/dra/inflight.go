package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// AllocateChoice turns the core's choice for a pod with claims (a node,
// its GPUs, and for claims with firstAvailable subrequests the
// alternative of the pod's device set, Claims.Set.FirstOf, the GPUs
// serve) into claim allocations with the structured allocator, the one
// kube-scheduler runs, over exactly the devices the core chose (over the
// node's, for claims that ask for all the devices that match): the core
// is the only chooser of GPUs. The allocation must be the core's choice:
// every chosen whole GPU and no other device, and for each request with
// subrequests the one the alternative picked, which the allocator names
// in its results (request/subrequest). When the claims' constraints
// refuse those devices, or the allocator makes another choice of them,
// it allocates nothing and returns a *RefusedError, having recorded for
// the next snapshots which GPUs of the node, and which alternative, can
// serve the claims (refuse). Otherwise it records the allocations and reservations
// as in flight, so that the next snapshots count them, and returns the
// writes for Writer.Reserve. Every claim of the pod is allocated or none
// is. A pod whose extended resources the chosen node's device plugin
// serves needs no claim: no writes.
func (s *State) AllocateChoice(ctx context.Context, ni NodeView, chosen []model.GPUShare, alt int, pod *corev1.Pod, pc *Claims, now time.Time) ([]ClaimWrite, error) {
	if pc.ERClaim != nil && pc.ERClaim.Created == nil && advertises(ni.Node, pc.ERClaim.Resource) {
		return nil, nil
	}
	delete(s.refused, podKey(pod))
	for _, cl := range pc.Alloc {
		if f := s.inflight[claimKey(cl)]; f != nil {
			// Another pod sharing the claim got it allocated this cycle:
			// this one joins it next cycle, on its node.
			return nil, fmt.Errorf("ResourceClaim %s is being allocated for another pod; the pod joins it on its node next cycle", claimKey(cl))
		}
	}
	node := ni.Node.Name
	var results []resourceapi.AllocationResult
	if len(pc.Alloc) > 0 {
		allocated := s.allocatedOn(node)
		want := sets.New[string]()
		for _, sh := range chosen {
			if sh.Index < 0 || sh.Index >= len(ni.Devs) || ni.Devs[sh.Index] == nil {
				continue
			}
			d := ni.Devs[sh.Index]
			if d.Dev != nil {
				want.Insert(d.Pool + "/" + d.Name)
			}
			// A MIG instance on the chosen GPU: any of its MIG devices,
			// as the GPU's counters allow.
			for _, mg := range d.MIGs {
				want.Insert(mg.Pool + "/" + mg.Name)
			}
		}
		set := pc.Set
		if set != nil && len(set.FirstOf) > 0 {
			if alt < 0 || alt >= len(set.FirstOf) {
				return nil, fmt.Errorf("allocating the pod's claims on node %s: the core chose alternative %d of %d", node, alt, len(set.FirstOf))
			}
			set = set.FirstOf[alt]
		}
		only := want
		switch {
		case set != nil && set.AdminNodes != nil:
			// Admin access takes no GPU, so the core chose none: the
			// allocator gives the claims any of the node's devices.
			only, want = nil, nil
		case set != nil && set.All && len(pc.Set.FirstOf) == 0:
			// All the devices that match: the allocator finds them over
			// the whole node, and they must be the core's choice.
			only = nil
		}
		var err error
		results, err = s.allocateOn(ctx, ni.Node, allocated, only, pc.Alloc)
		if err != nil {
			return nil, fmt.Errorf("allocating the pod's claims on node %s: %w", node, err)
		}
		if results == nil || set != nil && !sameChoice(set, want, results) {
			return nil, s.refuse(ctx, ni, allocated, pod, pc, now)
		}
	}
	who := consumer{key: podKey(pod), uid: pod.UID}
	writes := make([]ClaimWrite, 0, len(pc.Alloc)+len(pc.Shared))
	for i, cl := range pc.Alloc {
		alloc := results[i].DeepCopy()
		key := claimKey(cl)
		s.inflight[key] = &inflightClaim{alloc: alloc, node: node, pods: []consumer{who}}
		s.placeClaim(key)
		writes = append(writes, ClaimWrite{Claim: cl, Alloc: alloc, Pod: pod, ERClaim: pc.ERClaim})
	}
	for _, cl := range pc.Shared {
		key := claimKey(cl)
		f := s.inflight[key]
		if f == nil {
			f = &inflightClaim{node: node}
			s.inflight[key] = f
		}
		f.pods = append(f.pods, who)
		s.placeClaim(key)
		writes = append(writes, ClaimWrite{Claim: cl, Pod: pod, ERClaim: pc.ERClaim})
	}
	return writes, nil
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// sameChoice reports whether the allocator's results are the core's
// choice of set: the subrequests the set picked (Picks), and, for whole
// GPUs, exactly the devices chosen (want), every one of them: a request
// for all matching devices gets the node's whole set.
func sameChoice(set *DeviceSet, want sets.Set[string], results []resourceapi.AllocationResult) bool {
	if !picked(set.Picks, results) {
		return false
	}
	if want == nil || set.MIGSlices > 0 {
		return true
	}
	got := sets.New[string]()
	for i := range results {
		for _, r := range results[i].Devices.Results {
			got.Insert(r.Pool + "/" + r.Device)
		}
	}
	return got.Equal(want)
}

// picked reports whether results name, for every request with
// subrequests, the subrequest picks chose.
func picked(picks []Pick, results []resourceapi.AllocationResult) bool {
	for _, p := range picks {
		if p.Claim >= len(results) {
			return false
		}
		found := false
		for _, r := range results[p.Claim].Devices.Results {
			base, sub, ok := strings.Cut(r.Request, "/")
			if !ok || base != p.Request {
				continue
			}
			if sub != p.Sub {
				return false
			}
			found = true
		}
		if !found {
			return false
		}
	}
	return true
}

// RefusedError says that a pod's claims refuse the devices the core chose
// on a node: the pod is not bound this cycle, and the next snapshot gives
// the core the node's GPUs that can serve the claims (exact), or none
// (the node is excluded).
type RefusedError struct {
	Node     string
	Excluded bool
}

func (e *RefusedError) Error() string {
	if e.Excluded {
		return fmt.Sprintf("the claims' constraints refuse the GPUs chosen on node %s and no free devices of the node satisfy them: the next cycle places the pod on another node", e.Node)
	}
	return fmt.Sprintf("the claims' constraints refuse the GPUs chosen on node %s: the next cycle chooses among the node's GPUs that satisfy them", e.Node)
}

// Constraint names what goes back to the core, for the metric
// gpuplane_scheduler_claim_choice_refusals_total: "exact" or "excluded".
func (e *RefusedError) Constraint() string {
	if e.Excluded {
		return "excluded"
	}
	return "exact"
}

// refusal is what a pod's claims said of the core's choice on a node:
// only the GPUs in gpus (a mask by index; 0 for none) can serve them. The
// Memo makes the pod's device set exact on that node with it
// (Memo.exactSet). It stands until the pod's next allocation, while slices
// and classes stay as they were (version), and for at most RefusalTTL, as
// the node's other claims come and go.
type refusal struct {
	node string
	gpus uint64
	// alt is the alternative of a device set with FirstOf the allocator
	// chose over the node's free devices, -1 for none.
	alt     int
	version int
	at      time.Time
}

// RefusalTTL bounds how long a refusal stands.
const RefusalTTL = time.Minute

// refusalFor returns the refusal standing for a pod at now.
func (s *State) refusalFor(pod string, now time.Time) (refusal, bool) {
	r, ok := s.refused[pod]
	if !ok || r.version != s.version || now.Sub(r.at) > RefusalTTL {
		return refusal{}, false
	}
	return r, true
}

// refuse records that a pod's claims refuse the core's choice on a node:
// which GPUs of the node can serve them, learnt from the structured
// allocator over all the node's free devices (an allocation it keeps for
// nothing else), and returns the *RefusedError. Refusals older than
// RefusalTTL are dropped.
func (s *State) refuse(ctx context.Context, ni NodeView, allocated structured.AllocatedState, pod *corev1.Pod, pc *Claims, now time.Time) error {
	results, err := s.allocateOn(ctx, ni.Node, allocated, nil, pc.Alloc)
	if err != nil {
		return fmt.Errorf("allocating the pod's claims on node %s: %w", ni.Node.Name, err)
	}
	var gpus uint64
	for i := range results {
		for _, r := range results[i].Devices.Results {
			if sh, ok := DeviceShare(ni.Devs, ni.GPUs, r.Driver, r.Pool, r.Device); ok && sh.Index < 64 {
				gpus |= 1 << uint(sh.Index)
			}
		}
	}
	for k, r := range s.refused {
		if now.Sub(r.at) > RefusalTTL {
			delete(s.refused, k)
		}
	}
	alt := -1
	if pc.Set != nil && len(pc.Set.FirstOf) > 0 {
		// The alternative the allocator chose; when none, no GPU of the
		// node serves the claims.
		if results != nil {
			alt = slices.IndexFunc(pc.Set.FirstOf, func(x *DeviceSet) bool { return picked(x.Picks, results) })
		}
		if alt < 0 {
			gpus = 0
		}
	}
	s.refused[podKey(pod)] = refusal{node: ni.Node.Name, gpus: gpus, alt: alt, version: s.version, at: now}
	return &RefusedError{Node: ni.Node.Name, Excluded: gpus == 0}
}

// allocatedOn returns the devices and shares of a node that claims hold,
// allocated or in flight.
func (s *State) allocatedOn(node string) structured.AllocatedState {
	var allocs []*resourceapi.AllocationResult
	for key := range s.onNode[node] {
		var alloc *resourceapi.AllocationResult
		if f := s.inflight[key]; f != nil && f.alloc != nil {
			alloc = f.alloc
		} else if cl := s.claims[key]; cl != nil {
			alloc = cl.Status.Allocation
		}
		if alloc != nil {
			allocs = append(allocs, alloc)
		}
	}
	return AllocatedState(allocs)
}

// allocateOn runs the structured allocator for claims on one node over
// the node's slices of gpuplane's driver (Allocate), narrowed to the
// devices in only ("pool/name") when only is not nil.
func (s *State) allocateOn(ctx context.Context, node *corev1.Node, allocated structured.AllocatedState, only sets.Set[string], claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	nodeSlices := make([]*resourceapi.ResourceSlice, 0, len(s.byNode[node.Name]))
	for _, sl := range s.byNode[node.Name] {
		nodeSlices = append(nodeSlices, sl)
	}
	return Allocate(ctx, node, nodeSlices, only, ClassLister(s.classes), allocated, claims, s.cel)
}

// Forget drops a pod's in-flight claim allocations and reservations
// (AllocateChoice's writes): its bind failed, or the gang it belongs to
// was not bound.
func (s *State) Forget(pod string, writes []ClaimWrite) {
	for _, w := range writes {
		key := claimKey(w.Claim)
		f := s.inflight[key]
		if f == nil {
			continue
		}
		f.pods = slices.DeleteFunc(f.pods, func(x consumer) bool { return x.key == pod })
		if len(f.pods) == 0 || w.Alloc != nil {
			delete(s.inflight, key)
		}
		s.placeClaim(key)
	}
}
