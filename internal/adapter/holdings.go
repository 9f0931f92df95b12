package adapter

import (
	"cmp"
	"slices"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// nodeHoldings resolves what the running pods of one node hold: the GPU
// shares each takes and the request it counts as in the core's books. It
// keeps what is left of the node as pods take their part, and leaves out a
// pod that would over-allocate the node (the core refuses an
// over-allocated snapshot).
//
// Five sources say what a pod holds: claims, the node's record, binds in
// flight, the scheduler's annotation and automatic shares. For each pod
// the first of these steps that applies decides:
//
//  1. A pod that names ResourceClaims (spec.resourceClaims) holds exactly
//     the devices their allocations give it (in flight or written, whoever
//     wrote them: clusterCache.claimShares), whatever else says. Their
//     whole GPUs and MIG compute slices are added to its request.
//  2. The node's record (HeldAnnotation) on a bound pod, when it parses
//     for the node and matches the request's kind and count: what the
//     kubelet gave the pod, read in the terms of the request (heldAs:
//     replicas of a GPU time-sliced under the name the request asks
//     through are those replicas). For another scheduler's pod given parts of GPUs shared as
//     replicas, the request becomes those replicas (replicasHeld).
//  3. The claim made for the extended resources of a pod that names no
//     claim (dra.Memo): its devices, in place of the request's GPUs. A
//     record that parses but does not match the request sets this claim
//     aside too: the pod goes on to the scheduler's annotation (step 5).
//  4. A bind in flight (clusterCache.assumed) for a pod not bound yet: the
//     GPUs the core chose. A bound pod's record (step 2) or annotation
//     (step 5) is read instead, even while its bind is still assumed.
//  5. The scheduler's annotation (GPUsAnnotation), when it parses for the
//     node.
//  6. Automatic shares: the lowest free GPUs that fit the request
//     (autoShares), chosen once every pod with shares from steps 1 to 5
//     has taken them, so that a pod whose GPUs are known is never
//     displaced by one whose GPUs are guessed.
//
// A pod that asks for no GPU and has none from steps 1 to 5 holds none.
// Pods take their part in key order, those with known shares first, so
// the same pods always give the same result; a pod that asks for more CPU
// or memory than is left counts for what is left (the node is full, as
// kube-scheduler counts it), and one whose GPUs do not fit what is left
// is the one left out; one that asks for more of a scalar resource than
// is left counts for what is left of it, and a host port of one that
// another pod holds already is counted once. The claims no pod on the node holds
// take theirs before any pod (nodeAllocations).
type nodeHoldings struct {
	node *model.Node
	// ours is the scheduler's name: only other schedulers' pods are read
	// as replicas (step 2).
	ours string
	// claims are the shares each pod holds through claims, by pod key.
	claims map[string][]model.GPUShare
	// assumed are the binds in flight, by pod key.
	assumed map[string]assumption

	// What is left of the node.
	cpu, mem  int64
	gpuFree   []int64
	sliceFree []int
	// Its pods, scalar resources and host ports (resources.go).
	res heldResources
}

// podHeld is what one running pod holds.
type podHeld struct {
	pi *podInfo
	// req is what the pod counts as: its request, with its claims' GPUs
	// added or read as replicas.
	req    model.Request
	shares []model.GPUShare
	// known is false when its GPUs are left to automatic shares (step 6).
	known bool
}

func newNodeHoldings(node *model.Node, ours string, claims map[string][]model.GPUShare, assumed map[string]assumption) *nodeHoldings {
	h := &nodeHoldings{node: node, ours: ours, claims: claims, assumed: assumed, cpu: node.MilliCPU, mem: node.MemoryMiB,
		gpuFree: make([]int64, len(node.GPUs)), sliceFree: make([]int, len(node.GPUs))}
	for g := range node.GPUs {
		h.gpuFree[g], h.sliceFree[g] = node.GPUs[g].Capacity(), node.GPUs[g].MIGSlices
	}
	h.res.init(node)
	return h
}

// take counts req on shares against what is left of the node; when they
// do not fit it counts nothing and returns false.
func (h *nodeHoldings) take(req *model.Request, shares []model.GPUShare) bool {
	if h.cpu < req.MilliCPU || h.mem < req.MemoryMiB || !h.res.fits(req) {
		return false
	}
	for _, s := range shares {
		if s.Index < 0 || s.Index >= len(h.gpuFree) || h.gpuFree[s.Index] < s.Milli || h.sliceFree[s.Index] < s.MIGSlices {
			return false
		}
	}
	h.res.take(req)
	h.cpu -= req.MilliCPU
	h.mem -= req.MemoryMiB
	for _, s := range shares {
		h.gpuFree[s.Index] -= s.Milli
		h.sliceFree[s.Index] -= s.MIGSlices
	}
	return true
}

// resolve finds what each of pods holds and takes it, in the order of the
// type's doc. It returns the pods that fit, in the order they took their
// part, and the keys of those left out.
func (h *nodeHoldings) resolve(pods map[string]*podInfo) (held []podHeld, over []string) {
	all := make([]podHeld, 0, len(pods))
	for _, pi := range pods {
		all = append(all, h.known(pi))
	}
	slices.SortFunc(all, func(x, y podHeld) int {
		if x.known != y.known {
			if x.known {
				return -1
			}
			return 1
		}
		return cmp.Compare(x.pi.key, y.pi.key)
	})
	coverPorts(all)
	held = all[:0]
	for _, e := range all {
		if !e.known {
			e.shares = autoShares(h.node, h.gpuFree, h.sliceFree, &e.req)
		}
		if !h.take(&e.req, e.shares) {
			// More CPU or memory than is left: the node's allocatable
			// shrank under its pods (a kubelet restarted with larger
			// reservations). The kubelet keeps the pod and
			// kube-scheduler counts all of it, so the node has none of
			// it left for new pods; the pod counts for what is left, as
			// leaving it out would offer its room again.
			// The same holds for every resource it over-fills: its
			// scalars count for what is left of each, and a host port
			// another pod holds already is held all the same.
			short := e.req
			short.MilliCPU, short.MemoryMiB = min(short.MilliCPU, h.cpu), min(short.MemoryMiB, h.mem)
			short.Scalars, short.HostPorts = h.res.clip(&short)
			if !h.take(&short, e.shares) {
				over = append(over, e.pi.key)
				continue
			}
			e.req = short
		}
		held = append(held, e)
	}
	return held, over
}

// known resolves what pi holds by steps 1 to 5.
func (h *nodeHoldings) known(pi *podInfo) podHeld {
	e := podHeld{pi: pi, req: pi.req}
	if len(pi.pod.Spec.ResourceClaims) > 0 {
		// 1. The claims it names.
		e.shares, e.known = h.claims[pi.key], true
		claim := dra.ClaimRequest(e.shares)
		e.req.GPUs += claim.GPUs
		e.req.MIGSlices += claim.MIGSlices
		return e
	}
	if sh := h.claims[pi.key]; len(sh) > 0 {
		// 3. The claim made for its extended resources, unless the
		// node's record (step 2, next) has its say.
		e.shares, e.known = sh, true
	}
	if s, ok := pi.pod.Annotations[HeldAnnotation]; ok && pi.bound() {
		// 2. The node's record.
		if sh, err := parseShares(s, h.node); err == nil {
			r, ok := model.Request{}, false
			if pi.pod.Spec.SchedulerName != h.ours {
				r, ok = replicasHeld(h.node, &pi.req, sh)
			}
			if ok {
				e.req, e.shares, e.known = r, sh, true
			} else {
				e.shares, e.known = heldAs(h.node, &pi.req, sh)
			}
		}
	}
	// 4. A bind in flight, else 5. the scheduler's annotation.
	if a, ok := h.assumed[pi.key]; ok && !e.known && !pi.bound() {
		e.shares, e.known = a.shares, true
	} else if s, ok := pi.pod.Annotations[GPUsAnnotation]; ok && !e.known {
		if sh, err := parseShares(s, h.node); err == nil {
			e.shares, e.known = sh, true
		}
	}
	e.known = e.known || !pi.req.UsesGPU()
	return e
}

// replicasHeld reads the node's record of a pod another scheduler placed
// on GPUs time-sliced under nvidia.com/gpu. Such a pod asks for whole GPUs
// but the node gave it replicas, as many as it asked, and may give the
// rest of each GPU's replicas to other pods: it holds what the record
// says, a quarter of a GPU for one replica of four, not the whole GPU that
// heldAs makes of the replica gpuplane-scheduler itself chose a whole GPU
// for. The request returned counts those replicas (model.Request.Replicas)
// so that its queue's usage is the shares held. ok is false when the
// record holds no part of a GPU or does not add up to the request.
func replicasHeld(n *model.Node, req *model.Request, held []model.GPUShare) (model.Request, bool) {
	if req.GPUs == 0 || req.GPUMilli > 0 || req.MIGSlices > 0 || len(held) == 0 {
		return model.Request{}, false
	}
	replicas, milli, part := 0, int64(0), false
	for _, h := range held {
		g := &n.GPUs[h.Index]
		if h.MIGSlices > 0 || g.MIGSlices > 0 || g.MinShareMilli == 0 || g.ShareResource != string(ResourceGPU) || h.Milli%g.MinShareMilli != 0 {
			return model.Request{}, false
		}
		part = part || h.Milli < g.Capacity()
		replicas += int(h.Milli / g.MinShareMilli)
		milli += h.Milli
	}
	if !part || replicas != req.GPUs {
		return model.Request{}, false
	}
	out := *req
	out.GPUs, out.Replicas, out.ShareResource = 0, replicas, string(ResourceGPU)
	// What one share of it takes, as the core sizes the shares on a node.
	out.GPUMilli = milli / int64(len(held))
	return out, true
}

// heldAs reads the node's record of the GPUs a pod holds in the terms of
// its request: the GPUs from the record, how much of each from the request
// (a request for replicas of GPUs shared under the resource it asks
// through, nvidia.com/gpu or nvidia.com/gpu.shared, holds those replicas,
// from one GPU or several: model.GPU.InReplicas). ok is false when the
// record does not match the request's kind or count, and the scheduler's
// own choice stands.
func heldAs(n *model.Node, req *model.Request, held []model.GPUShare) ([]model.GPUShare, bool) {
	switch {
	case n.InReplicasOn(req):
		// Replicas in the node's unit (model.GPU.InReplicas): the record
		// holds them as shares, all of a GPU's as the whole GPU.
		replicas := int64(0)
		for _, h := range held {
			g := &n.GPUs[h.Index]
			switch {
			case h.MIGSlices > 0 || !g.InReplicas(req):
				return nil, false
			case h.Milli >= g.Capacity():
				replicas += g.Capacity() / g.MinShareMilli
			case h.Milli%g.MinShareMilli != 0:
				return nil, false
			default:
				replicas += h.Milli / g.MinShareMilli
			}
		}
		return held, replicas == int64(req.Replicas)
	case req.GPUs > 0:
		if len(held) != req.GPUs {
			return nil, false
		}
		out := make([]model.GPUShare, len(held))
		for k, h := range held {
			g := &n.GPUs[h.Index]
			if h.MIGSlices > 0 || g.MIGSlices > 0 {
				return nil, false
			}
			out[k] = model.GPUShare{Index: h.Index, Milli: g.Capacity(), MemoryMiB: g.MemoryMiB}
		}
		return out, true
	case req.MIGSlices > 0:
		return held, len(held) == 1 && held[0].MIGSlices == req.MIGSlices
	case req.Shared():
		if len(held) != 1 || held[0].MIGSlices > 0 || n.GPUs[held[0].Index].MIGSlices > 0 {
			return nil, false
		}
		return []model.GPUShare{{Index: held[0].Index, Milli: n.GPUs[held[0].Index].ShareMilli(req), MemoryMiB: req.GPUMemoryMiB}}, true
	}
	return nil, false
}

// autoShares picks GPUs for a running pod the scheduler did not place.
func autoShares(n *model.Node, gpuFree []int64, sliceFree []int, req *model.Request) []model.GPUShare {
	var out []model.GPUShare
	switch {
	case n.InReplicasOn(req):
		for g := range n.GPUs {
			if gp := &n.GPUs[g]; gp.InReplicas(req) && gpuFree[g] >= gp.ShareMilli(req) {
				return []model.GPUShare{{Index: g, Milli: gp.ShareMilli(req)}}
			}
		}
		// No one GPU has them all: the kubelet hands out replicas of any
		// of the node's GPUs, so the pod holds them from several, lowest
		// first, and as many as are left when the node has fewer (its
		// allocatable shrank under it), as kube-scheduler counts it.
		need := int64(req.Replicas)
		for g := range n.GPUs {
			if gp := &n.GPUs[g]; need > 0 && gp.InReplicas(req) {
				if k := min(gpuFree[g]/gp.MinShareMilli, need); k > 0 {
					out = append(out, model.GPUShare{Index: g, Milli: k * gp.MinShareMilli})
					need -= k
				}
			}
		}
	case req.GPUs > 0:
		for g := range n.GPUs {
			if len(out) == req.GPUs {
				break
			}
			if n.GPUs[g].MIGSlices == 0 && gpuFree[g] == n.GPUs[g].Capacity() {
				out = append(out, model.GPUShare{Index: g, Milli: n.GPUs[g].Capacity(), MemoryMiB: n.GPUs[g].MemoryMiB})
			}
		}
	case req.MIGSlices > 0:
		for g := range n.GPUs {
			if n.GPUs[g].MIGSlices > 0 && sliceFree[g] >= req.MIGSlices {
				return []model.GPUShare{{Index: g, MIGSlices: req.MIGSlices}}
			}
		}
	case req.GPUMilli > 0:
		for g := range n.GPUs {
			if need := n.GPUs[g].ShareMilli(req); n.GPUs[g].MIGSlices == 0 && gpuFree[g] >= need {
				return []model.GPUShare{{Index: g, Milli: need}}
			}
		}
	}
	return out
}
