package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// The adapter's side of the DRA seam: every call into package
// internal/adapter/dra, which owns DRA's state (dra.State, in the cluster
// cache, under its lock), the builder's DRA memo (dra.Memo) and the
// allocation of claims on the core's choice. Nothing else in the adapter
// reads a ResourceSlice, a DeviceClass or a claim's allocation.

// maxClaimGPUs bounds the GPUs one node may publish to the scheduler
// through ResourceSlices (dra.MaxGPUs).
const maxClaimGPUs = dra.MaxGPUs

// draDevice is one GPU a node publishes in a ResourceSlice of gpuplane's
// driver (dra.Device); deviceSet the devices that satisfy one shape of
// claims (dra.DeviceSet); podClaims what a pending pod asks through
// claims (dra.Claims); claimWrite one claim update a bind carries out
// before the pod is bound (dra.ClaimWrite); choiceRefusedError says a
// pod's claims refuse the core's choice (dra.RefusedError); draMemo is
// the builder's DRA memo (dra.Memo).
type (
	draDevice          = dra.Device
	deviceSet          = dra.DeviceSet
	podClaims          = dra.Claims
	claimWrite         = dra.ClaimWrite
	choiceRefusedError = dra.RefusedError
	draMemo            = dra.Memo
)

// newDRAState is the cache's DRA state; the nodes whose claims change
// are recomputed next cycle.
func (c *clusterCache) newDRAState() *dra.State {
	return dra.NewState(func(node string) { c.dirty[node] = true })
}

// upsertSlice records a ResourceSlice and refreshes the GPUs of the nodes
// it named and names.
func (c *clusterCache) upsertSlice(s *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.dra.UpsertSlice(s) {
		c.refreshDRANode(n)
	}
}

func (c *clusterCache) deleteSlice(s *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.dra.DeleteSlice(s) {
		c.refreshDRANode(n)
	}
}

func (c *clusterCache) upsertClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.UpsertClass(dc)
	c.poke()
}

func (c *clusterCache) deleteClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.DeleteClass(dc)
	c.poke()
}

func (c *clusterCache) upsertClaim(cl *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.UpsertClaim(cl)
	c.poke()
}

func (c *clusterCache) deleteClaim(cl *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.DeleteClaim(cl)
	c.poke()
}

// refreshDRANode recomputes a node's GPUs after its slices changed. Caller
// holds mu.
func (c *clusterCache) refreshDRANode(node string) {
	c.poke()
	ni := c.nodes[node]
	if ni == nil {
		return
	}
	m, devs := c.withDRA(ni.node, ni.base)
	if ni.base.Coming && len(devs) > 0 {
		// A coming node that publishes its GPUs as ResourceSlices is
		// up: read it again as it is.
		c.mu.Unlock()
		defer c.mu.Lock()
		c.upsertNode(ni.seen)
		return
	}
	if m.Topology != nil && ni.base.Topology == nil {
		// The topology describes the GPUs the node's slices publish.
		delete(c.nodeWarnings, node)
	}
	if !sameModelNode(&ni.m, &m) {
		c.nodesVersion++
		c.dirty[node] = true
	}
	c.nodes[node] = &nodeInfo{node: ni.node, seen: ni.seen, base: ni.base, m: m, devs: devs, replicas: ni.replicas, disruptedBy: ni.disruptedBy, comingUntil: ni.comingUntil}
}

// withDRA returns a node's model with the GPUs its ResourceSlices publish
// and their devices (dra.State.NodeGPUs). Caller holds mu.
func (c *clusterCache) withDRA(n *corev1.Node, base model.Node) (model.Node, []*draDevice) {
	return c.dra.NodeGPUs(n, base, topologyOf)
}

// draView is a node as the DRA state reads it.
func (ni *nodeInfo) draView() dra.NodeView {
	return dra.NodeView{Node: ni.node, GPUs: ni.m.GPUs, Devs: ni.devs}
}

// claimShares returns, for the node, the GPU shares each pod there holds
// through claims, and the claims no pod there holds
// (dra.State.ClaimShares). Caller holds mu.
func (c *clusterCache) claimShares(ni *nodeInfo) (byPod map[string][]model.GPUShare, orphans map[string][]model.GPUShare) {
	if c.dra.ClaimsOn(ni.node.Name) == 0 {
		return nil, nil
	}
	onNode := c.onNode[ni.node.Name]
	byUID := make(map[types.UID]string, len(onNode))
	for k, pi := range onNode {
		byUID[pi.pod.UID] = k
	}
	return c.dra.ClaimShares(ni.draView(), byUID, func(key string) bool {
		_, ok := onNode[key]
		return ok
	})
}

// allocateClaims allocates a pod's claims on exactly the core's choice
// (the GPUs, and the alternative of its device set they serve) and
// records them in flight (dra.State.AllocateChoice); a
// *dra.RefusedError says the claims refuse the choice, which goes back to
// the core in the next snapshot.
func (c *clusterCache) allocateClaims(ctx context.Context, node string, chosen []model.GPUShare, alt int, pod *corev1.Pod, pc *podClaims) ([]claimWrite, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.nodes[node]
	if ni == nil {
		return nil, fmt.Errorf("node %s is gone", node)
	}
	writes, err := c.dra.AllocateChoice(ctx, ni.draView(), chosen, alt, pod, pc, time.Now())
	if refused := (*dra.RefusedError)(nil); errors.As(err, &refused) {
		c.poke()
	}
	return writes, err
}

// forgetClaims drops a pod's in-flight claim allocations and reservations
// (dra.State.Forget): its bind failed, or the gang it belongs to was not
// bound.
func (c *clusterCache) forgetClaims(pod string, writes []claimWrite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.Forget(pod, writes)
	c.poke()
}

// reserveClaims writes a pod's claim allocations and reservations
// (dra.Writer.Reserve); on failure the writes already made are undone.
func (w *apiWriter) reserveClaims(ctx context.Context, writes []claimWrite) error {
	return dra.Writer{Client: w.client, Log: w.log}.Reserve(ctx, writes)
}

// releaseClaims undoes reserveClaims' writes (dra.Writer.Release).
func (w *apiWriter) releaseClaims(ctx context.Context, writes []claimWrite) {
	dra.Writer{Client: w.client, Log: w.log}.Release(ctx, writes)
}

// podClaims resolves what a pending pod asks through ResourceClaims, or
// for its extended resources through a claim (dra.Memo.PodClaims): nil,
// nil when neither; a *BadInputError when the pod waits. Caller holds
// c.mu.
func (b *builder) podClaims(c *clusterCache, pi *podInfo, now time.Time) (*podClaims, *BadInputError) {
	b.dra.Log = b.log
	nodes := dra.Nodes{Version: b.nodesVersion, List: func() []dra.NodeView {
		out := make([]dra.NodeView, len(b.nodes))
		for i, n := range b.nodes {
			out[i] = n.draView()
		}
		return out
	}}
	pc, w := b.dra.PodClaims(c.dra, nodes, dra.Pending{Pod: pi.pod, Key: pi.key, Req: &pi.req, Extended: pi.extendedResource,
		AdminNamespace: dra.AdminNamespace(c.nsLabels[pi.pod.Namespace])}, now)
	if w != nil {
		return nil, &BadInputError{Reason: w.Reason, Msg: w.Msg}
	}
	return pc, nil
}

// mayClaim reports whether podClaims may find claims for a pending pod: it
// names ResourceClaims, or asks for an extended resource a DeviceClass may
// serve. A pod that does neither (most pods, and every pod of a cluster
// without DRA) skips the look-up. Caller holds c.mu.
func (c *clusterCache) mayClaim(pi *podInfo) bool {
	return len(pi.pod.Spec.ResourceClaims) > 0 || pi.extendedResource != "" && c.dra.Serves(pi.extendedResource)
}

// claimableResource is the one extended resource of a pending pod that a
// DeviceClass may serve through a claim made for it
// (dra.ClaimableResource).
func claimableResource(p *corev1.Pod, r *model.Request) (corev1.ResourceName, *BadInputError) {
	res, w := dra.ClaimableResource(p, r)
	if w != nil {
		return "", &BadInputError{Reason: w.Reason, Msg: w.Msg}
	}
	return res, nil
}

// withDeviceSets returns the GPUs of node i with the device sets in use
// they belong to (dra.WithDeviceSets).
func withDeviceSets(gpus []model.GPU, i int, sets []*deviceSet) []model.GPU {
	return dra.WithDeviceSets(gpus, i, sets)
}
