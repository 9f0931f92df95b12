package adapter

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// claimWrite is one claim update a bind carries out before the pod is
// bound (dra.ClaimWrite); extendedResourceClaim says a claim serves a
// pod's extended resources (dra.ERClaim).
type (
	claimWrite            = dra.ClaimWrite
	extendedResourceClaim = dra.ERClaim
)

// reserveClaims writes a pod's claim allocations and reservations
// (dra.Writer.Reserve); on failure the writes already made are undone.
func (w *apiWriter) reserveClaims(ctx context.Context, writes []claimWrite) error {
	return dra.Writer{Client: w.client, Log: w.log}.Reserve(ctx, writes)
}

// releaseClaims undoes reserveClaims' writes (dra.Writer.Release).
func (w *apiWriter) releaseClaims(ctx context.Context, writes []claimWrite) {
	dra.Writer{Client: w.client, Log: w.log}.Release(ctx, writes)
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
			if d.Dev != nil {
				want.Insert(d.Pool + "/" + d.Name)
			}
			// A MIG instance on the chosen GPU: any of its MIG devices,
			// as the GPU's counters allow.
			for _, mg := range d.MIGs {
				want.Insert(mg.Pool + "/" + mg.Name)
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
		writes = append(writes, claimWrite{Claim: cl, Alloc: alloc, Pod: pod})
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
		writes = append(writes, claimWrite{Claim: cl, Pod: pod})
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
	return dra.AllocatedState(allocs)
}

// allocateOn runs the structured allocator for claims on one node over
// the node's slices of gpuplane's driver (dra.Allocate), narrowed to the
// devices in only ("pool/name") when only is not nil. Caller holds mu.
func (c *clusterCache) allocateOn(ctx context.Context, ni *nodeInfo, allocated structured.AllocatedState, only sets.Set[string], claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	nodeSlices := make([]*resourceapi.ResourceSlice, 0, len(c.dra.byNode[ni.node.Name]))
	for _, s := range c.dra.byNode[ni.node.Name] {
		nodeSlices = append(nodeSlices, s)
	}
	return dra.Allocate(ctx, ni.node, nodeSlices, only, dra.ClassLister(c.dra.classes), allocated, claims, c.dra.cel)
}

// forgetClaims drops a pod's in-flight claim allocations and reservations:
// its bind failed, or the gang it belongs to was not bound.
func (c *clusterCache) forgetClaims(pod string, writes []claimWrite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range writes {
		key := claimKey(w.Claim)
		f := c.dra.inflight[key]
		if f == nil {
			continue
		}
		f.pods = slices.DeleteFunc(f.pods, func(x consumer) bool { return x.key == pod })
		if len(f.pods) == 0 || w.Alloc != nil {
			delete(c.dra.inflight, key)
		}
		c.placeClaim(key)
	}
	c.poke()
}
