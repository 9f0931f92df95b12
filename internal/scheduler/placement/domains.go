package placement

import (
	"math"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Placing a gang inside a network domain (a rack, a block, an NVLink
// domain) needs the best node among a subset of the nodes and a quick
// estimate of how many pods a node could still take. The scheduling core
// chooses the domains; these only answer for the nodes it names.

// DomainValue is node n's value of the topology key: from n.Domains,
// else n.Labels, and whether it has one.
func DomainValue(n *model.Node, key string) (string, bool) {
	if v, ok := n.Domains[key]; ok {
		return v, true
	}
	v, ok := n.Labels[key]
	return v, ok
}

// PlaceIn is Place limited to nodes (indexes, in any order) less those in
// skip: the best option for req among them by the policy, its pod
// constraints applied, ties to the lowest index. It changes nothing. Under
// a policy of node-local scorers it reads the nodes' cached best options,
// so it costs a look at each node named; otherwise it scores their
// options.
func (p *Placer) PlaceIn(req *model.Request, nodes []int32, skip map[int]bool) (Option, bool) {
	v := p.st.view(req)
	if req.Volumes.Dynamic() {
		v = nil // as Place: a fresh look at each node's options
	}
	if !p.local || req.Volumes.Dynamic() {
		return p.scanIn(req, nodes, skip, v)
	}
	c := p.cache(req)
	w := &p.walk
	cands := w.cands[:0]
	top := math.Inf(-1)
	for _, n := range nodes {
		b := c.best[n]
		if b.opt < 0 || skip[int(n)] || len(cands) > 0 && b.score < top {
			continue
		}
		if v != nil && v.check(int(n)) != "" {
			continue
		}
		if len(cands) > 0 && b.score == top {
			cands = append(cands, n)
			continue
		}
		cands, top = append(cands[:0], n), b.score
	}
	w.cands = cands
	if len(cands) == 0 {
		return Option{}, false
	}
	i := lowest(cands)
	if v != nil && v.prefers() {
		i = v.prefer(sortedCopy(cands))
	}
	return p.st.fitOptions(int(i), req)[c.best[i].opt], true
}

// scanIn is PlaceIn for policies that are not node-local and for requests
// whose volumes change what other nodes offer: every option of every node
// named is scored.
func (p *Placer) scanIn(req *model.Request, nodes []int32, skip map[int]bool, v *view) (Option, bool) {
	var best Option
	bestScore, bestNode, found := math.Inf(-1), int32(-1), false
	var cands []int32
	var opts []Option
	for _, n := range nodes {
		if skip[int(n)] || v != nil && v.check(int(n)) != "" {
			continue
		}
		for _, o := range p.st.fitOptions(int(n), req) {
			sc := p.Score(req, &o)
			switch {
			case !found || sc > bestScore || sc == bestScore && n < bestNode:
				best, bestScore, bestNode, found = o, sc, n, true
				cands, opts = append(cands[:0], n), append(opts[:0], o)
			case sc == bestScore && n != bestNode && !slices.Contains(cands, n):
				cands, opts = append(cands, n), append(opts, o)
			}
		}
	}
	if !found || v == nil || !v.prefers() {
		return best, found
	}
	i := v.prefer(sortedCopy(cands))
	for k, n := range cands {
		if n == i {
			return opts[k], true
		}
	}
	return best, true
}

// Room estimates, for each node i asked, how many pods asking req it could
// take at once as it is now: 0 when req fits it nowhere (node selector,
// taints, free room; pod constraints are not read), otherwise the least of
// its free CPU, memory and GPUs over what one pod takes, at least 1. It
// never says less than the truth, so a domain whose nodes' room falls
// short of a gang cannot hold it; it may say more (it does not count pods
// allowances, scalar resources, ports or volumes beyond the first pod).
// The function returned reads the state as it is when called.
func (p *Placer) Room(req *model.Request) func(i int) int {
	var c *shapeCache
	if p.local && !req.Volumes.Dynamic() {
		c = p.cache(req)
	}
	return func(i int) int {
		if c != nil {
			if c.best[i].opt < 0 {
				return 0
			}
		} else if len(p.st.fitOptions(i, req)) == 0 {
			return 0
		}
		return p.st.room(i, req)
	}
}

// room is Room for a node req fits at least once.
func (s *State) room(i int, req *model.Request) int {
	ns := &s.Nodes[i]
	n := math.MaxInt32
	if req.MilliCPU > 0 {
		n = min(n, int(ns.FreeCPU/req.MilliCPU))
	}
	if req.MemoryMiB > 0 {
		n = min(n, int(ns.FreeMem/req.MemoryMiB))
	}
	gpus := ns.Node.GPUs
	replicas := req.Replicas > 0 && req.GPUs > 0 && ns.Node.InReplicasOn(req)
	switch {
	case req.GPUs > 0 && !replicas:
		free := 0
		for g := range gpus {
			if serves(req, &gpus[g]) && !ns.GPUUsed(g) {
				free++
			}
		}
		n = min(n, free/req.GPUs)
	case req.MIGSlices > 0:
		k := 0
		for g := range gpus {
			if serves(req, &gpus[g]) {
				k += ns.SliceFree[g] / req.MIGSlices
			}
		}
		n = min(n, k)
	case req.Shared() || replicas:
		k := 0
		for g := range gpus {
			if share := gpus[g].ShareMilli(req); share > 0 && serves(req, &gpus[g]) {
				k += int(ns.GPUFree[g] / share)
			}
		}
		n = min(n, k)
	}
	return max(n, 1)
}

// lowest is the smallest of ns.
func lowest(ns []int32) int32 {
	m := ns[0]
	for _, n := range ns[1:] {
		m = min(m, n)
	}
	return m
}

// sortedCopy returns ns in ascending order: view.prefer breaks its ties
// by order.
func sortedCopy(ns []int32) []int32 {
	out := slices.Clone(ns)
	slices.Sort(out)
	return out
}
