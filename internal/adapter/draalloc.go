package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// claimWrite is one claim update a bind carries out before the pod is
// bound: the allocation to write (nil when the claim is allocated already
// and the pod only joins its consumers) and the pod to reserve it for.
type claimWrite struct {
	claim *resourceapi.ResourceClaim
	alloc *resourceapi.AllocationResult
	pod   *corev1.Pod
	// erClaim, when not nil, says the claim serves the pod's extended
	// resources: it is made first if need be, and the pod's status names
	// it (draext.go).
	erClaim *extendedResourceClaim
}

// errClaimsDoNotFit is returned when a node's free devices no longer
// satisfy a pod's claims.
var errClaimsDoNotFit = errors.New("the claims do not fit the node's free devices")

// classLister serves the structured allocator the cached DeviceClasses.
// It is called only under the cache's lock.
type classLister struct{ c *draCache }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l.c.classes))
	for _, dc := range l.c.classes {
		out = append(out, dc)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if dc := l.c.classes[name]; dc != nil {
		return dc, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// allocateClaims turns the core's choice for a pod with claims (a node and
// its GPUs) into claim allocations with the structured allocator, the one
// kube-scheduler runs, over exactly the devices the core chose: the core
// is the only chooser of GPUs. When the claims' constraints refuse those
// devices it allocates nothing and returns a *choiceRefusedError, having
// recorded for the next snapshot which GPUs of the node can serve the
// claims (refuseChoice). Otherwise it records the allocations and
// reservations as in flight, so that the next snapshots count them, and
// returns the writes. Every claim of the pod is allocated or none is.
func (c *clusterCache) allocateClaims(ctx context.Context, node string, chosen []model.GPUShare, pod *corev1.Pod, pc *podClaims) ([]claimWrite, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.nodes[node]
	if ni == nil {
		return nil, fmt.Errorf("node %s is gone", node)
	}
	delete(c.dra.refused, podKey(pod))
	for _, cl := range pc.alloc {
		if f := c.dra.inflight[claimKey(cl)]; f != nil {
			// Another pod sharing the claim got it allocated this cycle:
			// this one joins it next cycle, on its node.
			return nil, fmt.Errorf("ResourceClaim %s is being allocated for another pod; the pod joins it on its node next cycle", claimKey(cl))
		}
	}
	var results []resourceapi.AllocationResult
	if len(pc.alloc) > 0 {
		allocated := c.allocatedOn(ni)
		want := sets.New[string]()
		for _, s := range chosen {
			if s.Index < 0 || s.Index >= len(ni.devs) || ni.devs[s.Index] == nil {
				continue
			}
			d := ni.devs[s.Index]
			if d.dev != nil {
				want.Insert(d.pool + "/" + d.name)
			}
			// A MIG instance on the chosen GPU: any of its MIG devices,
			// as the GPU's counters allow.
			for _, mg := range d.migs {
				want.Insert(mg.pool + "/" + mg.name)
			}
		}
		var err error
		results, err = c.allocateOn(ctx, ni, allocated, want, pc.alloc)
		if err != nil {
			return nil, fmt.Errorf("allocating the pod's claims on node %s: %w", node, err)
		}
		if results == nil {
			return nil, c.refuseChoice(ctx, ni, allocated, pod, pc.alloc)
		}
	}
	who := consumer{key: podKey(pod), uid: pod.UID}
	writes := make([]claimWrite, 0, len(pc.alloc)+len(pc.shared))
	for i, cl := range pc.alloc {
		alloc := results[i].DeepCopy()
		key := claimKey(cl)
		c.dra.inflight[key] = &inflightClaim{alloc: alloc, node: node, pods: []consumer{who}}
		c.placeClaim(key)
		writes = append(writes, claimWrite{claim: cl, alloc: alloc, pod: pod})
	}
	for _, cl := range pc.shared {
		key := claimKey(cl)
		f := c.dra.inflight[key]
		if f == nil {
			f = &inflightClaim{node: node}
			c.dra.inflight[key] = f
		}
		f.pods = append(f.pods, who)
		c.placeClaim(key)
		writes = append(writes, claimWrite{claim: cl, pod: pod})
	}
	return writes, nil
}

// choiceRefusedError says that a pod's claims refuse the devices the core
// chose on a node: the pod is not bound this cycle, and the next snapshot
// gives the core the node's GPUs that can serve the claims (exact), or
// none (the node is excluded).
type choiceRefusedError struct {
	node     string
	excluded bool
}

func (e *choiceRefusedError) Error() string {
	if e.excluded {
		return fmt.Sprintf("the claims' constraints refuse the GPUs chosen on node %s and no free devices of the node satisfy them: the next cycle places the pod on another node", e.node)
	}
	return fmt.Sprintf("the claims' constraints refuse the GPUs chosen on node %s: the next cycle chooses among the node's GPUs that satisfy them", e.node)
}

// constraint names what goes back to the core, for the metric.
func (e *choiceRefusedError) constraint() string {
	if e.excluded {
		return "excluded"
	}
	return "exact"
}

// choiceRefusal is what a pod's claims said of the core's choice on a
// node: only the GPUs in gpus (a mask by index; 0 for none) can serve
// them. The builder makes the pod's device set exact on that node with
// it (builder.exactSet). It stands until the pod's next allocation, while
// slices and classes stay as they were (version), and for at most
// choiceRefusalTTL, as the node's other claims come and go.
type choiceRefusal struct {
	node    string
	gpus    uint64
	version int
	at      time.Time
}

// choiceRefusalTTL bounds how long a choiceRefusal stands.
const choiceRefusalTTL = time.Minute

// refuseChoice records that a pod's claims refuse the core's choice on a
// node: which GPUs of the node can serve them, learnt from the structured
// allocator over all the node's free devices (an allocation it keeps for
// nothing else), and returns the *choiceRefusedError. Caller holds mu.
func (c *clusterCache) refuseChoice(ctx context.Context, ni *nodeInfo, allocated structured.AllocatedState, pod *corev1.Pod, claims []*resourceapi.ResourceClaim) error {
	results, err := c.allocateOn(ctx, ni, allocated, nil, claims)
	if err != nil {
		return fmt.Errorf("allocating the pod's claims on node %s: %w", ni.node.Name, err)
	}
	var gpus uint64
	for i := range results {
		for _, r := range results[i].Devices.Results {
			if sh, ok := ni.deviceShare(r.Driver, r.Pool, r.Device); ok && sh.Index < 64 {
				gpus |= 1 << uint(sh.Index)
			}
		}
	}
	now := time.Now()
	for k, r := range c.dra.refused {
		if now.Sub(r.at) > choiceRefusalTTL {
			delete(c.dra.refused, k)
		}
	}
	c.dra.refused[podKey(pod)] = choiceRefusal{node: ni.node.Name, gpus: gpus, version: c.dra.version, at: now}
	c.poke()
	return &choiceRefusedError{node: ni.node.Name, excluded: gpus == 0}
}

// allocatedOn returns the devices and shares of a node that claims hold,
// allocated or in flight. Caller holds mu.
func (c *clusterCache) allocatedOn(ni *nodeInfo) structured.AllocatedState {
	var allocs []*resourceapi.AllocationResult
	for key := range c.dra.onNode[ni.node.Name] {
		var alloc *resourceapi.AllocationResult
		if f := c.dra.inflight[key]; f != nil && f.alloc != nil {
			alloc = f.alloc
		} else if cl := c.dra.claims[key]; cl != nil {
			alloc = cl.Status.Allocation
		}
		if alloc != nil {
			allocs = append(allocs, alloc)
		}
	}
	return allocatedState(allocs)
}

// allocateOn runs the structured allocator for claims on one node over
// the node's slices of gpuplane's driver, narrowed to the devices in only
// ("pool/name") when only is not nil. Caller holds mu.
func (c *clusterCache) allocateOn(ctx context.Context, ni *nodeInfo, allocated structured.AllocatedState, only sets.Set[string], claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	var slices []*resourceapi.ResourceSlice
	for _, s := range c.dra.byNode[ni.node.Name] {
		if only != nil {
			cp := *s
			cp.Spec.Devices = nil
			for _, d := range s.Spec.Devices {
				if only.Has(s.Spec.Pool.Name + "/" + d.Name) {
					cp.Spec.Devices = append(cp.Spec.Devices, d)
				}
			}
			s = &cp
		}
		slices = append(slices, s)
	}
	a, err := structured.NewAllocator(ctx, claimFeatures, allocated, classLister{c.dra}, slices, c.dra.cel)
	if err != nil {
		return nil, fmt.Errorf("creating the structured allocator: %w", err)
	}
	return a.Allocate(ctx, ni.node, claims)
}

// forgetClaims drops a pod's in-flight claim allocations and reservations:
// its bind failed, or the gang it belongs to was not bound.
func (c *clusterCache) forgetClaims(pod string, writes []claimWrite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range writes {
		key := claimKey(w.claim)
		f := c.dra.inflight[key]
		if f == nil {
			continue
		}
		f.pods = slices.DeleteFunc(f.pods, func(x consumer) bool { return x.key == pod })
		if len(f.pods) == 0 || w.alloc != nil {
			delete(c.dra.inflight, key)
		}
		c.placeClaim(key)
	}
	c.poke()
}

// maxClaimWriteAttempts bounds the retries of one claim update that lost
// a race with another writer (409 Conflict).
const maxClaimWriteAttempts = 4

// reserveClaims writes a pod's claim allocations and reservations: for a
// claim it allocates, the delete-protection finalizer (as kube-scheduler
// adds it, so the claim is not removed while allocated) and then
// status.allocation with the pod in status.reservedFor; for a claim
// already allocated, the pod added to status.reservedFor. Each update
// names the resourceVersion it read, so a claim changed meanwhile is read
// again, and one allocated by someone else meanwhile fails the write. On
// failure the writes already made are undone and the error returned.
func (w *apiWriter) reserveClaims(ctx context.Context, writes []claimWrite) error {
	for i, cw := range writes {
		if err := w.reserveClaim(ctx, cw); err != nil {
			w.releaseClaims(ctx, writes[:i])
			return fmt.Errorf("reserving ResourceClaim %s for pod %s: %w", claimKey(cw.claim), cw.pod.Name, err)
		}
	}
	return nil
}

func (w *apiWriter) reserveClaim(ctx context.Context, cw claimWrite) error {
	if cw.erClaim != nil {
		return w.reserveExtended(ctx, cw)
	}
	claims := w.client.ResourceV1().ResourceClaims(cw.claim.Namespace)
	cl := cw.claim
	for attempt := 0; ; attempt++ {
		err := reserveOnce(ctx, w, cl, cw)
		if err == nil || !apierrors.IsConflict(err) || attempt+1 >= maxClaimWriteAttempts {
			return err
		}
		fresh, gerr := claims.Get(ctx, cl.Name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("reading the claim again after a conflict: %w", gerr)
		}
		if fresh.UID != cw.claim.UID {
			return fmt.Errorf("the claim was deleted and made again")
		}
		cl = fresh
	}
}

// reserveOnce is one attempt of reserveClaim on the claim as last read.
func reserveOnce(ctx context.Context, w *apiWriter, cl *resourceapi.ResourceClaim, cw claimWrite) error {
	claims := w.client.ResourceV1().ResourceClaims(cl.Namespace)
	ref := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: cw.pod.Name, UID: cw.pod.UID}
	if slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == ref.UID }) &&
		(cw.alloc == nil || cl.Status.Allocation != nil) {
		return nil
	}
	status := map[string]any{"reservedFor": append(slices.Clone(cl.Status.ReservedFor), ref)}
	if cw.alloc != nil {
		if cl.Status.Allocation != nil {
			return fmt.Errorf("the claim was allocated meanwhile by another scheduler")
		}
		if !slices.Contains(cl.Finalizers, resourceapi.Finalizer) {
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cl.ResourceVersion, "uid": cl.UID,
				"finalizers": append(slices.Clone(cl.Finalizers), resourceapi.Finalizer)}})
			if err != nil {
				return fmt.Errorf("encoding the finalizer: %w", err)
			}
			next, err := claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("adding the %s finalizer: %w", resourceapi.Finalizer, err)
			}
			cl = next
		}
		status["allocation"] = cw.alloc
	} else if cl.Status.Allocation == nil {
		return fmt.Errorf("the claim's allocation was removed meanwhile")
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cl.ResourceVersion, "uid": cl.UID}, "status": status})
	if err != nil {
		return fmt.Errorf("encoding the allocation: %w", err)
	}
	if _, err := claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("writing status.allocation and status.reservedFor: %w", err)
	}
	return nil
}

// releaseClaims undoes reserveClaims' writes: the pod leaves
// status.reservedFor, and a claim this scheduler allocated for it that no
// other consumer now holds loses the allocation and then the finalizer.
// A failure is logged: the resourceclaim controller deallocates a claim
// that nothing reserves.
func (w *apiWriter) releaseClaims(ctx context.Context, writes []claimWrite) {
	for _, cw := range writes {
		if err := w.releaseClaim(ctx, cw); err != nil {
			w.log.Error(err, "releasing a ResourceClaim", "claim", klog.KObj(cw.claim), "pod", klog.KObj(cw.pod))
		}
	}
}

func (w *apiWriter) releaseClaim(ctx context.Context, cw claimWrite) error {
	if cw.erClaim != nil {
		// A pod not bound loses its extended-resource claim, as
		// kube-scheduler deletes it.
		return w.deleteERClaim(ctx, cw.erClaim)
	}
	claims := w.client.ResourceV1().ResourceClaims(cw.claim.Namespace)
	for attempt := 0; ; attempt++ {
		cl, err := claims.Get(ctx, cw.claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the claim: %w", err)
		}
		if cl.UID != cw.claim.UID {
			return nil
		}
		err = releaseOnce(ctx, w, cl, cw)
		if err == nil || !apierrors.IsConflict(err) || attempt+1 >= maxClaimWriteAttempts {
			return err
		}
	}
}

func releaseOnce(ctx context.Context, w *apiWriter, cl *resourceapi.ResourceClaim, cw claimWrite) error {
	claims := w.client.ResourceV1().ResourceClaims(cl.Namespace)
	rest := slices.DeleteFunc(slices.Clone(cl.Status.ReservedFor), func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == cw.pod.UID })
	ours := cw.alloc != nil && cl.Status.Allocation != nil && apiequality.Semantic.DeepEqual(cl.Status.Allocation.Devices, cw.alloc.Devices)
	dealloc := ours && len(rest) == 0
	next := cl
	if len(rest) != len(cl.Status.ReservedFor) || dealloc {
		status := map[string]any{"reservedFor": rest}
		if dealloc {
			status["allocation"] = nil
			status["reservedFor"] = nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cl.ResourceVersion}, "status": status})
		if err != nil {
			return fmt.Errorf("encoding the release: %w", err)
		}
		if next, err = claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("clearing status.reservedFor/allocation: %w", err)
		}
	}
	// The finalizer this scheduler added goes once the claim is neither
	// allocated nor reserved (also when the allocation was never written).
	if cw.alloc == nil || next.Status.Allocation != nil || len(next.Status.ReservedFor) > 0 || !slices.Contains(next.Finalizers, resourceapi.Finalizer) {
		return nil
	}
	fin := slices.DeleteFunc(slices.Clone(next.Finalizers), func(f string) bool { return f == resourceapi.Finalizer })
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": next.ResourceVersion, "finalizers": fin}})
	if err != nil {
		return fmt.Errorf("encoding the finalizer removal: %w", err)
	}
	if _, err := claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("removing the %s finalizer: %w", resourceapi.Finalizer, err)
	}
	return nil
}
