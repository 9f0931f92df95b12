package placement

import (
	"cmp"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Option is one way to place a request on a node: which GPUs, and how much
// of each.
type Option struct {
	Node   int
	Shares []model.GPUShare
}

// modelAllowed reports whether GPU g of a node is of a model req allows.
func modelAllowed(req *model.Request, g *model.GPU) bool {
	return len(req.GPUModels) == 0 || slices.Contains(req.GPUModels, g.Model)
}

// claimAllowed reports whether GPU g may serve req as far as claims go: a
// request through claims takes only GPUs of its device set, any other
// request only GPUs the device plugin offers.
func claimAllowed(req *model.Request, g *model.GPU) bool {
	if req.DeviceSet != "" {
		return g.InSet(req.DeviceSet)
	}
	return !g.ClaimOnly
}

// serves reports whether GPU g, empty, can serve req's kind of GPU request:
// a GPU in service, of a model req allows, and offered the way req asks: whole GPUs from GPUs
// not in MIG mode and not offered only as shares (and shared under the
// resource req names, when it names one without replicas); a share from GPUs not in
// MIG mode, not offered only whole, with the memory, and shared under the
// resource req asks through; a MIG instance from a MIG GPU with the
// slices, in its static layout's size when it has one.
func serves(req *model.Request, g *model.GPU) bool {
	if g.Withdrawn || g.Repartitioning || !modelAllowed(req, g) || !claimAllowed(req, g) {
		return false
	}
	switch {
	case req.GPUs > 0 && !g.InReplicas(req):
		return g.MIGSlices == 0 && !g.SharesOnly && (req.Replicas > 0 || req.ShareResource == "" || g.ShareResource == req.ShareResource)
	case req.MIGSlices > 0:
		return g.MIGSlices >= req.MIGSlices && (g.MIGInstanceSlices == 0 || g.MIGInstanceSlices == req.MIGSlices)
	default:
		return g.MIGSlices == 0 && !g.WholeOnly && (g.Capacity() >= g.ShareMilli(req) || g.Spans(req)) && (g.MemoryMiB == 0 || g.MemoryMiB >= req.GPUMemoryMiB) &&
			(g.ShareResource == "" || req.ShareResource == "" || g.ShareResource == req.ShareResource)
	}
}

// StaticFits reports whether req could run on node n were n empty: n is
// schedulable (or req tolerates its cordon), its labels match req's node selector, req tolerates its
// taints, n has the CPU and memory, and when req uses GPUs n has GPUs of an
// allowed model, in the mode and of the size req needs (MIG GPUs with
// enough slices for a MIG instance, non-MIG GPUs otherwise). It reads only
// what never changes for a node: room freed on a node req does not
// statically fit is of no use to req.
func StaticFits(n *model.Node, req *model.Request) bool {
	if len(req.FirstOf) > 0 {
		return slices.ContainsFunc(req.FirstOf, func(alt model.Request) bool { return StaticFits(n, &alt) })
	}
	if !nodeAccepts(n, req, false) || n.MilliCPU < req.MilliCPU || n.MemoryMiB < req.MemoryMiB || !staticResourcesFit(n, req) || !staticVolumeFit(n, req) {
		return false
	}
	if !req.UsesGPU() {
		return true
	}
	need := max(req.GPUs, 1)
	if req.AllOfSet {
		need = max(setGPUs(n, req), 1)
	}
	if req.Replicas > 0 && n.InReplicasOn(req) {
		need = 1 // replicas of one GPU
		for g := range n.GPUs {
			if n.GPUs[g].Spans(req) {
				// Replicas of as many GPUs as it takes.
				perGPU := n.GPUs[g].Capacity() / n.GPUs[g].MinShareMilli
				need = int((int64(req.Replicas) + perGPU - 1) / perGPU)
				break
			}
		}
	}
	for g := range n.GPUs {
		if serves(req, &n.GPUs[g]) {
			if need--; need == 0 {
				return true
			}
		}
	}
	return false
}

// setGPUs is how many GPUs of n belong to req's device set: all of
// which an AllOfSet request takes there.
func setGPUs(n *model.Node, req *model.Request) int {
	k := 0
	for g := range n.GPUs {
		if n.GPUs[g].InSet(req.DeviceSet) {
			k++
		}
	}
	return k
}

// Hosts reports whether node i, as it is now, would take req were one of
// its GPUs of an allowed model in the layout req needs: it accepts req
// (schedulable, selector, taints) and has its CPU and memory free. The
// core asks it before proposing a new MIG layout for req on the node.
func (s *State) Hosts(i int, req *model.Request) bool {
	ns := &s.Nodes[i]
	return !ns.closed && nodeAccepts(ns.Node, req, false) && ns.FreeCPU >= req.MilliCPU && ns.FreeMem >= req.MemoryMiB && ns.res.fits(req, ns.Pods)
}

// ModelAllowed reports whether GPU g is of a model req allows.
func ModelAllowed(req *model.Request, g *model.GPU) bool { return modelAllowed(req, g) }

// nodeAccepts checks the node-level part of StaticFits: schedulability,
// selector, taints. comingUp reads a coming node as it will be once up
// (State.SetComingUp).
func nodeAccepts(n *model.Node, req *model.Request, comingUp bool) bool {
	if cordoned(n, req, comingUp) {
		return false
	}
	if !Selects(req, n.Labels) {
		return false
	}
	for _, t := range n.Taints {
		if t.Effect == "PreferNoSchedule" {
			continue
		}
		if !tolerates(req.Tolerations, t) {
			return false
		}
	}
	return true
}

// Selects reports whether req's node selector admits a node with labels:
// a node's own, or those a node pool's future nodes will carry.
func Selects(req *model.Request, labels map[string]string) bool {
	for k, v := range req.NodeSelector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// cordoned reports whether n is unschedulable for req: n is about to go
// away (Disrupted), has yet to register its GPUs (Coming) and comingUp is
// not set, or is Unschedulable and req does not tolerate
// model.TaintUnschedulable.
func cordoned(n *model.Node, req *model.Request, comingUp bool) bool {
	return n.Disrupted || n.Coming && !comingUp || n.Unschedulable && !tolerates(req.Tolerations, model.Taint{Key: model.TaintUnschedulable, Effect: "NoSchedule"})
}

func tolerates(tols []model.Toleration, t model.Taint) bool {
	for _, tol := range tols {
		if tol.Key == "" && tol.Exists {
			return true
		}
		if tol.Key == t.Key && (tol.Exists || tol.Value == t.Value) {
			return true
		}
	}
	return false
}

// Options lists the distinct ways req fits node i as it is now, in GPU index
// order; nil if it does not fit, its pod constraints included (Allows).
func (s *State) Options(i int, req *model.Request) []Option {
	if !s.Allows(i, req) {
		return nil
	}
	return s.fitOptions(i, req)
}

// fitOptions is Options without pod constraints: what the node's free
// state alone allows, the same on every node of one signature. Shares of a GPU are offered once per
// distinct free amount (the lowest-index GPU with that amount), since GPUs
// with the same free state are interchangeable for every score plugin but
// topology, and topology only ranks whole-GPU sets.
func (s *State) fitOptions(i int, req *model.Request) []Option {
	ns := &s.Nodes[i]
	if ns.closed || !nodeAccepts(ns.Node, req, s.comingUp) || ns.FreeCPU < req.MilliCPU || ns.FreeMem < req.MemoryMiB || !ns.res.fits(req, ns.Pods) ||
		req.Volumes != nil && s.volumeWhy(i, req) != "" {
		return nil
	}
	gpus := ns.Node.GPUs
	replicas := req.Replicas > 0 && req.GPUs > 0 && ns.Node.InReplicasOn(req)
	switch {
	case req.GPUs > 0 && !replicas:
		var free []int
		for g := range gpus {
			if serves(req, &gpus[g]) && !ns.GPUUsed(g) {
				free = append(free, g)
			}
		}
		need := req.GPUs
		if req.AllOfSet {
			// Every GPU of the set on the node, each free and in
			// service, or the node does not take the request.
			need = setGPUs(ns.Node, req)
			if need == 0 {
				return nil
			}
		}
		if len(free) < need {
			return nil
		}
		set := pickSet(ns.Node, free, need)
		sh := make([]model.GPUShare, len(set))
		for k, g := range set {
			sh[k] = model.GPUShare{Index: g, Milli: gpus[g].Capacity(), MemoryMiB: gpus[g].MemoryMiB}
		}
		return []Option{{Node: i, Shares: sh}}
	case req.MIGSlices > 0:
		var out []Option
		seen := map[int]bool{}
		for g := range gpus {
			if !serves(req, &gpus[g]) || ns.SliceFree[g] < req.MIGSlices || seen[ns.SliceFree[g]] {
				continue
			}
			seen[ns.SliceFree[g]] = true
			out = append(out, Option{Node: i, Shares: []model.GPUShare{{Index: g, MIGSlices: req.MIGSlices}}})
		}
		if ns.Node.Topology == nil {
			slices.SortStableFunc(out, func(a, b Option) int { return ns.SliceFree[a.Shares[0].Index] - ns.SliceFree[b.Shares[0].Index] })
		}
		return out
	case replicas && spans(ns.Node, req):
		return s.spanOptions(i, req)
	case req.Shared() || replicas:
		var out []Option
		type key struct{ milli, mem int64 }
		seen := map[key]bool{}
		for g := range gpus {
			if !serves(req, &gpus[g]) || ns.GPUFree[g] < gpus[g].ShareMilli(req) {
				continue
			}
			if gpus[g].MemoryMiB > 0 && ns.GPUMem[g] < req.GPUMemoryMiB {
				continue
			}
			k := key{ns.GPUFree[g], ns.GPUMem[g]}
			if ns.Node.Topology == nil && seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, Option{Node: i, Shares: []model.GPUShare{{Index: g, Milli: gpus[g].ShareMilli(req), MemoryMiB: req.GPUMemoryMiB}}})
		}
		if ns.Node.Topology == nil {
			// Canonical order (by free amount) so that nodes with one
			// signature list the same options in the same order.
			slices.SortStableFunc(out, func(a, b Option) int {
				ga, gb := a.Shares[0].Index, b.Shares[0].Index
				if c := cmp.Compare(ns.GPUFree[ga], ns.GPUFree[gb]); c != 0 {
					return c
				}
				return cmp.Compare(ns.GPUMem[ga], ns.GPUMem[gb])
			})
		}
		return out
	}
	return []Option{{Node: i}}
}

// spans reports whether req takes its replicas from several of n's GPUs
// (model.GPU.Spans).
func spans(n *model.Node, req *model.Request) bool {
	for g := range n.GPUs {
		if n.GPUs[g].Spans(req) {
			return true
		}
	}
	return false
}

// spanOptions is where req, counted in replicas and asking for more than
// one GPU of node i has (model.GPU.Spans), fits: its replicas taken from
// the node's free GPUs that serve it, the emptiest first (then by index),
// all of each GPU's free replicas until the last, which gives what is
// left; none when they have too few free replicas together.
func (s *State) spanOptions(i int, req *model.Request) []Option {
	ns := &s.Nodes[i]
	gpus := ns.Node.GPUs
	var order []int
	for g := range gpus {
		if serves(req, &gpus[g]) && gpus[g].MinShareMilli > 0 && ns.GPUFree[g] >= gpus[g].MinShareMilli {
			order = append(order, g)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ns.GPUFree[b], ns.GPUFree[a]) })
	left := int64(req.Replicas)
	var sh []model.GPUShare
	for _, g := range order {
		if left == 0 {
			break
		}
		take := min(ns.GPUFree[g]/gpus[g].MinShareMilli, left)
		left -= take
		sh = append(sh, model.GPUShare{Index: g, Milli: take * gpus[g].MinShareMilli})
	}
	if left > 0 {
		return nil
	}
	slices.SortFunc(sh, func(a, b model.GPUShare) int { return cmp.Compare(a.Index, b.Index) })
	return []Option{{Node: i, Shares: sh}}
}

// pickSet chooses k of the free GPUs: the lowest indexes when the node has
// no known topology, otherwise the set with the strongest weakest link
// (then the largest total link score), grown greedily from each start.
func pickSet(n *model.Node, free []int, k int) []int {
	if n.Topology == nil || k == 1 || k == len(free) {
		return free[:k]
	}
	var best []int
	bestMin, bestSum := -1, -1
	for _, start := range free {
		set := []int{start}
		for len(set) < k {
			cand, candScore := -1, -1
			for _, g := range free {
				if slices.Contains(set, g) {
					continue
				}
				sc := 1 << 30
				for _, h := range set {
					l, _ := n.Topology.Between(g, h)
					sc = min(sc, l.Score())
				}
				if sc > candScore {
					cand, candScore = g, sc
				}
			}
			set = append(set, cand)
		}
		mn, sum := linkStats(n, set)
		if mn > bestMin || (mn == bestMin && sum > bestSum) {
			best, bestMin, bestSum = set, mn, sum
		}
	}
	slices.Sort(best)
	return best
}

// linkStats returns the weakest and the summed link score within a GPU set.
func linkStats(n *model.Node, set []int) (mn, sum int) {
	mn = 1 << 30
	if len(set) < 2 || n.Topology == nil {
		return 0, 0
	}
	for a := 0; a < len(set); a++ {
		for b := a + 1; b < len(set); b++ {
			l, _ := n.Topology.Between(set[a], set[b])
			sc := l.Score()
			mn = min(mn, sc)
			sum += sc
		}
	}
	return mn, sum
}

// Reasons a node is filtered out for a request, in the order Why checks
// them; after FilterSelector Why checks host ports, pods and scalar
// resources (resources.go).
const (
	FilterUnschedulable = "node unschedulable"
	// FilterComing: the node has yet to register its GPUs
	// (model.Node.Coming).
	FilterComing   = "node registering its GPUs"
	FilterSelector = "node selector or taints"
	FilterCPU      = "insufficient cpu"
	FilterMemory   = "insufficient memory"
	FilterGPU      = "insufficient gpu"
	// FilterGPUKind: no GPU of the node is offered the way a share or a
	// MIG instance is asked for (no sharing, another share resource, no
	// MIG instance of that size), however free it is.
	FilterGPUKind = "no GPU offered that way"
	// FilterClaimDevices: no device of the node satisfies the pod's
	// ResourceClaims (their device classes and selectors), however free.
	FilterClaimDevices = "no device satisfies the claims"
	// FilterKept: the node is kept free, for a group that waits for whole
	// nodes (State.Close).
	FilterKept = "node kept free for a group waiting for a whole node"
)

// Why returns the first filter that refuses req on node i as the state
// is now, or "" when the node has a place for it.
func (s *State) Why(i int, req *model.Request) string {
	ns := &s.Nodes[i]
	switch {
	case ns.Node.Coming && !s.comingUp && !ns.Node.Disrupted:
		return FilterComing
	case cordoned(ns.Node, req, s.comingUp):
		return FilterUnschedulable
	case !nodeAccepts(ns.Node, req, s.comingUp):
		return FilterSelector
	case ns.closed:
		return FilterKept
	}
	if why := ns.res.why(req, ns.Pods); why != "" {
		return why // host ports, pods, scalar resources
	}
	switch {
	case ns.FreeCPU < req.MilliCPU:
		return FilterCPU
	case ns.FreeMem < req.MemoryMiB:
		return FilterMemory
	case s.volumeWhy(i, req) != "":
		return s.volumeWhy(i, req)
	case req.DeviceSet != "" && !slices.ContainsFunc(ns.Node.GPUs, func(g model.GPU) bool { return serves(req, &g) }):
		return FilterClaimDevices
	case tooManyReplicas(ns.Node, req):
		return FilterReplicasOneGPU
	case (req.Shared() || req.MIGSlices > 0) && !slices.ContainsFunc(ns.Node.GPUs, func(g model.GPU) bool { return serves(req, &g) }):
		return FilterGPUKind
	case s.fitOptions(i, req) == nil:
		return FilterGPU
	}
	return s.constraintWhy(i, req)
}
