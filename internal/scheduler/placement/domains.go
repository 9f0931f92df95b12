package placement

import (
	"container/heap"
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
	skipped := newSkipSet(skip)
	for _, n := range nodes {
		b := c.best[n]
		if b.opt < 0 || len(cands) > 0 && b.score < top || skipped.has(int(n)) {
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
	i := p.first(cands)
	if v != nil && v.prefers() {
		i = v.prefer(sortedCopy(cands))
	}
	return p.st.fitOptions(int(i), req)[c.best[i].opt], true
}

// PlaceExcept is Place off the nodes in skip, which are a few: the best
// option for req on any other node, its pod constraints applied, where
// Place would find it with those nodes closed. It changes nothing. Under a
// policy of node-local scorers, for a request without pod constraints, it
// walks the shape cache's tree from the best node down, past the skipped
// ones, so it costs a few steps for each skipped node in the way rather
// than a look at every node.
func (p *Placer) PlaceExcept(req *model.Request, skip map[int]bool) (Option, bool) {
	if !p.local || req.Volumes.Dynamic() || p.st.view(req) != nil {
		if len(p.every) != len(p.st.Nodes) {
			p.every = make([]int32, len(p.st.Nodes))
			for i := range p.every {
				p.every[i] = int32(i)
			}
		}
		return p.PlaceIn(req, p.every, skip)
	}
	c := p.cache(req)
	if len(c.best) == 0 {
		return Option{}, false
	}
	skipped := newSkipSet(skip)
	h := &p.walk.heap
	h.c, h.pos = c, h.pos[:0]
	if n := c.tree[1]; n >= 0 && c.best[n].opt >= 0 {
		h.pos = append(h.pos, 1)
	}
	for h.Len() > 0 {
		k := heap.Pop(h).(int32)
		n := c.tree[k]
		if int(k) >= c.size {
			if !skipped.has(int(n)) {
				return p.st.fitOptions(int(n), req)[c.best[n].opt], true
			}
			continue
		}
		for _, ch := range [2]int32{2 * k, 2*k + 1} {
			if m := c.tree[ch]; m >= 0 && c.best[m].opt >= 0 {
				heap.Push(h, ch)
			}
		}
	}
	return Option{}, false
}

// skipSet answers whether a node is among those PlaceIn is to pass over,
// which are a few: it asks for every node named, and a scan of a few
// indexes costs less than a map lookup.
type skipSet struct {
	few  [8]int
	n    int
	many map[int]bool // when there are more than few holds
}

func newSkipSet(skip map[int]bool) skipSet {
	var s skipSet
	if len(skip) > len(s.few) {
		s.many = skip
		return s
	}
	for k, in := range skip {
		if in {
			s.few[s.n] = k
			s.n++
		}
	}
	return s
}

func (s *skipSet) has(n int) bool {
	if s.many != nil {
		return s.many[n]
	}
	return slices.Contains(s.few[:s.n], n)
}

// scanIn is PlaceIn for policies that are not node-local and for requests
// whose volumes change what other nodes offer: every option of every node
// named is scored.
func (p *Placer) scanIn(req *model.Request, nodes []int32, skip map[int]bool, v *view) (Option, bool) {
	var best Option
	bestScore, bestNode, found := math.Inf(-1), int32(-1), false
	var cands []int32
	var opts []Option
	skipped := newSkipSet(skip)
	for _, n := range nodes {
		if skipped.has(int(n)) || v != nil && v.check(int(n)) != "" {
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
// take at once: 0 when req fits it nowhere (node selector, taints, free
// room; pod constraints are not read), otherwise the least of its free
// CPU, memory and GPUs over what one pod takes, at least 1. It never says
// less than the truth, so a domain whose nodes' room falls short of a gang
// cannot hold it; it may say more (it does not count pods allowances,
// scalar resources, ports or volumes beyond the first pod). The function
// returned answers for the state as it is when Room is called: ask Room
// again after changing the state. Under a policy of node-local scorers
// the answers are kept with the request's shape cache, so a node is
// worked out again only once it has changed.
func (p *Placer) Room(req *model.Request) func(i int) int {
	if len(req.FirstOf) > 0 {
		// A pod with alternatives takes whichever places: a node has
		// the most room any of them finds there.
		rooms := make([]func(int) int, len(req.FirstOf))
		for k := range req.FirstOf {
			rooms[k] = p.Room(&req.FirstOf[k])
		}
		return func(i int) int {
			most := 0
			for _, r := range rooms {
				most = max(most, r(i))
			}
			return most
		}
	}
	if !p.local || req.Volumes.Dynamic() {
		return func(i int) int {
			if len(p.st.fitOptions(i, req)) == 0 {
				return 0
			}
			return p.st.room(i, req)
		}
	}
	c := p.cache(req)
	if c.room == nil {
		c.room = make([]int32, len(c.best))
		for i := range c.room {
			c.room[i] = -1
		}
	}
	return func(i int) int {
		if c.best[i].opt < 0 {
			return 0
		}
		if c.room[i] < 0 {
			c.room[i] = int32(p.st.room(i, req))
		}
		return int(c.room[i])
	}
}

// room is Room for a node req fits at least once.
func (s *State) room(i int, req *model.Request) int {
	ns := &s.Nodes[i]
	return max(1, roomOf(ns.Node, req, ns.FreeCPU, ns.FreeMem, ns.GPUFree, ns.GPUMem, ns.SliceFree))
}

// RoomFreed is Room's estimate for node i were the pods holding cpu,
// mem and the GPU shares freed gone from it: 0 when req could not run
// there even so (StaticFits, or too little room), else an upper bound on
// the pods it could take. It changes nothing.
func (s *State) RoomFreed(i int, req *model.Request, cpu, mem int64, freed []model.GPUShare) int {
	ns := &s.Nodes[i]
	if ns.closed || !StaticFits(ns.Node, req) {
		return 0
	}
	b := &s.roomBuf
	gpuFree, gpuMem, sliceFree := append(b.free[:0], ns.GPUFree...), append(b.mem[:0], ns.GPUMem...), append(b.slices[:0], ns.SliceFree...)
	b.free, b.mem, b.slices = gpuFree, gpuMem, sliceFree
	for _, sh := range freed {
		if sh.Index >= 0 && sh.Index < len(gpuFree) {
			gpuFree[sh.Index] += sh.Milli
			gpuMem[sh.Index] += sh.MemoryMiB
			sliceFree[sh.Index] += sh.MIGSlices
		}
	}
	return roomOf(ns.Node, req, ns.FreeCPU+cpu, ns.FreeMem+mem, gpuFree, gpuMem, sliceFree)
}

// roomOf is how many pods asking req fit node n with the free room given,
// by CPU, memory and GPUs alone.
func roomOf(n *model.Node, req *model.Request, cpu, mem int64, gpuFree, gpuMem []int64, sliceFree []int) int {
	k := math.MaxInt32
	if req.MilliCPU > 0 {
		k = min(k, int(cpu/req.MilliCPU))
	}
	if req.MemoryMiB > 0 {
		k = min(k, int(mem/req.MemoryMiB))
	}
	gpus := n.GPUs
	replicas := req.Replicas > 0 && req.GPUs > 0 && n.InReplicasOn(req)
	switch {
	case req.GPUs > 0 && !replicas:
		free := 0
		for g := range gpus {
			gp := &gpus[g]
			used := gpuFree[g] < gp.Capacity() || gp.MIGSlices > 0 && sliceFree[g] < gp.MIGSlices || gp.MemoryMiB > 0 && gpuMem[g] < gp.MemoryMiB
			if !used && serves(req, gp) {
				free++
			}
		}
		k = min(k, free/req.GPUs)
	case req.MIGSlices > 0:
		m := 0
		for g := range gpus {
			if serves(req, &gpus[g]) {
				m += sliceFree[g] / req.MIGSlices
			}
		}
		k = min(k, m)
	case req.Shared() || replicas:
		m := 0
		for g := range gpus {
			if share := gpus[g].ShareMilli(req); share > 0 && serves(req, &gpus[g]) {
				m += int(gpuFree[g] / share)
			}
		}
		k = min(k, m)
	}
	return k
}

// first is the node of ns that goes first among equal scores
// (SetTieOrder).
func (p *Placer) first(ns []int32) int32 {
	m := ns[0]
	for _, n := range ns[1:] {
		if p.tie == nil && n < m || p.tie != nil && p.tie[n] < p.tie[m] {
			m = n
		}
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
