package scheduler

import (
	"cmp"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Gangs placed by the network's topology (model.GangTopology). A level is
// a node label key; a domain of level l is the nodes that share their
// value of its key and of every wider level's key (a node without one of
// the wider keys shares its absence), so that every domain of a level lies
// inside one domain of each wider level, and a node without the level's
// own key is in no domain of it. Nodes labelled consistently (every rack
// inside one block) have the domains their keys say.

// maxDomainTries bounds the domains one placement tries, at each level,
// for the gang and for each of its slices: each try is a placement rolled
// back when the gang does not fit, and domains are tried in the order
// most likely to hold it.
const maxDomainTries = 8

// maxMovableListed bounds the pods an Unplaced entry names as movable.
const maxMovableListed = 16

// topoIndex is the domains of one list of levels on the scheduler's
// nodes, built the first time a gang names that list and kept until the
// nodes change (reset).
type topoIndex struct {
	levels []string
	// dom[l][n] is node n's domain of level l, -1 when it has none.
	dom  [][]int32
	doms [][]domain
	// top lists the domains of level 0 and topLoose the nodes without
	// the level-0 key: the cluster's own sub-domains.
	top      []int32
	topLoose []int32
}

// domain is one domain of a level.
type domain struct {
	name    string  // the level's value
	members []int32 // node indexes, ascending
	// children are the domains of the next level inside this one, loose
	// the members without the next level's key.
	children []int32
	loose    []int32
}

func newTopoIndex(nodes []model.Node, levels []string) *topoIndex {
	x := &topoIndex{levels: slices.Clone(levels), dom: make([][]int32, len(levels)), doms: make([][]domain, len(levels))}
	type pathKey struct {
		parent int32
		value  string
		has    bool
	}
	// path[n] names the values of node n's levels so far, absence
	// included: a domain is the nodes of one path with the level's key.
	path, next := make([]int32, len(nodes)), make([]int32, len(nodes))
	for l, key := range levels {
		ids := map[pathKey]int32{}
		var pathDom []int32
		dom := make([]int32, len(nodes))
		for n := range nodes {
			v, ok := placement.DomainValue(&nodes[n], key)
			k := pathKey{path[n], v, ok}
			id, seen := ids[k]
			if !seen {
				id = int32(len(ids))
				ids[k] = id
				d := int32(-1)
				if ok {
					d = int32(len(x.doms[l]))
					x.doms[l] = append(x.doms[l], domain{name: v})
				}
				pathDom = append(pathDom, d)
			}
			next[n], dom[n] = id, pathDom[id]
			if d := dom[n]; d >= 0 {
				x.doms[l][d].members = append(x.doms[l][d].members, int32(n))
			}
		}
		x.dom[l] = dom
		path, next = next, path
	}
	if len(levels) == 0 {
		return x
	}
	for d := range x.doms[0] {
		x.top = append(x.top, int32(d))
	}
	for n := range nodes {
		if x.dom[0][n] < 0 {
			x.topLoose = append(x.topLoose, int32(n))
		}
	}
	for l := 0; l+1 < len(levels); l++ {
		seen := make([]bool, len(x.doms[l+1]))
		for d := range x.doms[l] {
			dd := &x.doms[l][d]
			for _, n := range dd.members {
				ch := x.dom[l+1][n]
				switch {
				case ch < 0:
					dd.loose = append(dd.loose, n)
				case !seen[ch]:
					seen[ch] = true
					dd.children = append(dd.children, ch)
				}
			}
		}
	}
	return x
}

// topology returns the domains of levels on the scheduler's nodes.
func (s *Scheduler) topology(levels []string) *topoIndex {
	key := strings.Join(levels, "\n")
	if x := s.topo[key]; x != nil {
		return x
	}
	if s.topo == nil {
		s.topo = map[string]*topoIndex{}
	}
	x := newTopoIndex(s.nodes, levels)
	if len(s.topo) == 0 && len(levels) > 0 {
		s.placer.SetTieOrder(x.rank())
		s.tieLevels = slices.Clone(levels)
	}
	s.topo[key] = x
	return x
}

// rank orders the nodes by their domains, widest level first (nodes
// without a level's key after those with it), then by index: the tie
// order under which pods the policy places alike fill one domain before
// the next. The first list of levels a gang names sets it, until the
// nodes change.
func (x *topoIndex) rank() []int32 {
	n := len(x.dom[0])
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	key := func(l int, i int32) int64 {
		if d := x.dom[l][i]; d >= 0 {
			return int64(d)
		}
		return math.MaxInt64
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		for l := range x.dom {
			if c := cmp.Compare(key(l, a), key(l, b)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
	rank := make([]int32, n)
	for r, i := range order {
		rank[i] = int32(r)
	}
	return rank
}

// shape is one distinct request of a gang and how many of its pods ask
// for it.
type shape struct {
	req  *model.Request
	pods int
}

// gangTopo is what a topology gang's placements share within one cycle:
// its levels, slices and request shapes, and the domain its running
// members pin it to.
type gangTopo struct {
	c *cycle
	p *pending
	x *topoIndex
	// req, pref and slice are level indexes, -1 when not set.
	req, pref, slice int
	// slices lists the gang's slices, each its pods' indexes in pod
	// order; loose the pods in no slice. slicePin is, per slice, the
	// domain of the slice level its running members sit in (a gang partly
	// running: the rest of the slice joins them), -1 when none runs and
	// noSliceDomain when they sit in no one domain.
	slices   [][]int
	slicePin []int32
	loose    []int
	shapes   []shape
	// shapeOf is each pod's shape.
	shapeOf []int
	need    int
	// pin is the required domain the gang's running members sit in, -1
	// when none run; stuck is set when they sit in no one domain of it.
	pin   int32
	stuck bool
	// avoid is the current placement's nodes to keep off (backfill);
	// room[s][n] is node n's room for shape s as last computed (in the
	// scheduler's scratch space, which one gang uses at a time).
	avoid map[int]bool
	room  [][]int32
}

// roomScratch returns room for shapes rows of a room per node, shared by
// the gangs of a cycle, which use it one at a time.
func (s *Scheduler) roomScratch(shapes int) [][]int32 {
	for len(s.rooms) < shapes {
		s.rooms = append(s.rooms, make([]int32, len(s.nodes)))
	}
	return s.rooms[:shapes]
}

// topologyOf returns p's topology placement for this cycle, working it
// out the first time; nil when p has no topology.
func (c *cycle) topologyOf(p *pending) *gangTopo {
	if p.topo != nil || p.g.Topology == nil {
		return p.topo
	}
	t := p.g.Topology
	g := &gangTopo{c: c, p: p, x: c.s.topology(t.Levels), need: p.min(), pin: -1,
		req: levelOf(t, t.Required), pref: levelOf(t, t.Preferred), slice: levelOf(t, t.SliceRequired)}
	pods := p.g.Pods
	g.shapeOf = make([]int, len(pods))
	for k := range pods {
		r := &pods[k].Request
		s := slices.IndexFunc(g.shapes, func(s shape) bool { return s.req == r || reflect.DeepEqual(s.req, r) })
		if s < 0 {
			s = len(g.shapes)
			g.shapes = append(g.shapes, shape{req: r})
		}
		g.shapes[s].pods++
		g.shapeOf[k] = s
	}
	// Slices are named (Pod.Slice) by sub-group, and by size where every
	// pod's slice is named; else taken SliceSize pods at a time.
	named := t.SliceSize == 0 || !slices.ContainsFunc(pods, func(p model.Pod) bool { return p.Slice == "" })
	switch {
	case g.slice < 0:
		for k := range pods {
			g.loose = append(g.loose, k)
		}
	case !named:
		for k := 0; k < len(pods); k += t.SliceSize {
			var sl []int
			for j := k; j < min(k+t.SliceSize, len(pods)); j++ {
				sl = append(sl, j)
			}
			g.slices = append(g.slices, sl)
		}
	default:
		at := map[string]int{}
		for k := range pods {
			name := pods[k].Slice
			if name == "" {
				g.loose = append(g.loose, k)
				continue
			}
			i, ok := at[name]
			if !ok {
				i = len(g.slices)
				at[name] = i
				g.slices = append(g.slices, nil)
			}
			g.slices[i] = append(g.slices[i], k)
		}
	}
	g.slicePin = make([]int32, len(g.slices))
	for i := range g.slicePin {
		g.slicePin[i] = -1
	}
	if named {
		g.pinSlices(c.s.run.groups[p.g.Name])
	}
	if g.req >= 0 {
		if rg := c.s.run.groups[p.g.Name]; rg != nil {
			for _, ps := range rg.members {
				d := g.x.dom[g.req][ps.node]
				switch {
				case d < 0 || g.pin >= 0 && d != g.pin:
					g.stuck = true
				default:
					g.pin = d
				}
			}
		}
	}
	p.topo = g
	return g
}

// noSliceDomain pins a slice whose running members sit in no one domain
// of the slice level: no placement keeps it whole.
const noSliceDomain = -2

// pinSlices pins each named slice (Pod.Slice) to the domain of the slice
// level its running members (Allocation.Slice) sit in. Slices counted by
// size over the pending pods alone have no running members.
func (g *gangTopo) pinSlices(rg *runningGroup) {
	if rg == nil || len(g.slices) == 0 {
		return
	}
	at := make(map[string]int, len(g.slices))
	for i, sl := range g.slices {
		at[g.p.g.Pods[sl[0]].Slice] = i
	}
	for _, ps := range rg.members {
		i, ok := at[ps.a.Slice]
		if !ok || ps.a.Slice == "" {
			continue
		}
		switch d := g.x.dom[g.slice][ps.node]; {
		case g.slicePin[i] == noSliceDomain:
		case d < 0 || g.slicePin[i] >= 0 && d != g.slicePin[i]:
			g.slicePin[i] = noSliceDomain
		default:
			g.slicePin[i] = d
		}
	}
}

func levelOf(t *model.GangTopology, key string) int {
	if key == "" {
		return -1
	}
	return t.Level(key)
}

// members returns the nodes of domain d of level l; the whole cluster
// (nil) for level -1.
func (g *gangTopo) members(l int, d int32) []int32 {
	if l < 0 {
		return nil
	}
	return g.x.doms[l][d].members
}

// computeRooms works out every node's room for each shape, on the nodes
// of set (nil: all).
func (g *gangTopo) computeRooms(set []int32) {
	g.room = g.c.s.roomScratch(len(g.shapes))
	pl := g.c.s.placer
	for s := range g.shapes {
		room, row := pl.Room(g.shapes[s].req), g.room[s]
		if set == nil {
			for n := range row {
				row[n] = int32(room(n))
			}
			continue
		}
		for _, n := range set {
			row[n] = int32(room(int(n)))
		}
	}
}

// holds is how many of the gang's pods a set of nodes has room for, by
// the rooms last computed (an upper bound), and the room it has for the
// gang's shapes in all: what best fit minimises.
func (g *gangTopo) holds(nodes []int32) (fit, total int) {
	for s := range g.shapes {
		sum := 0
		for _, n := range nodes {
			sum += int(g.room[s][n])
		}
		fit += min(sum, g.shapes[s].pods)
		total += sum
	}
	return fit, total
}

// ranked is a domain with what it holds of the gang.
type ranked struct {
	d          int32
	fit, total int
}

// candidates ranks the domains of level l inside pin (the required
// domain the gang must use, -1: any) that have room for the gang, best
// fit first: the least room in all, so that the domains with the most
// stay whole for larger gangs; ties to the first domain.
func (g *gangTopo) candidates(l int, pin int32) []ranked {
	var out []ranked
	for d := range g.x.doms[l] {
		dm := &g.x.doms[l][d]
		if pin >= 0 && g.x.dom[g.req][dm.members[0]] != pin {
			continue
		}
		if fit, total := g.holds(dm.members); fit >= g.need {
			out = append(out, ranked{int32(d), fit, total})
		}
	}
	slices.SortStableFunc(out, func(a, b ranked) int { return cmp.Compare(a.total, b.total) })
	return out
}

// placeTopology places p by its topology as one statement, like place:
// at its preferred level (else its required one) in the domain that fits
// it best, else one level wider, filling the sub-domains largest first,
// and so on up to its required level, or the whole cluster when none is
// required. It returns p's binds in pod order.
func (c *cycle) placeTopology(p *pending, avoid map[int]bool) ([]model.Bind, bool) {
	if p.bad != "" {
		return nil, false
	}
	g := c.topologyOf(p)
	if g.stuck {
		return nil, false
	}
	pin := g.pin
	if c.within >= 0 {
		if pin >= 0 && pin != c.within {
			return nil, false
		}
		pin = c.within
	}
	g.avoid = avoid
	var set []int32
	if pin >= 0 {
		set = g.x.doms[g.req][pin].members
	}
	g.computeRooms(set)
	st := c.s.st
	top := g.pref
	if top < 0 {
		top = g.req
	}
	for l := top; l >= g.req; l-- {
		if l < 0 {
			if pin >= 0 {
				break
			}
			mark := st.Checkpoint()
			if binds := g.placeGroups(g.groups(-1, -1)); len(binds) >= g.need {
				return binds, true
			}
			st.Rollback(mark)
			break
		}
		cands := g.candidates(l, pin)
		for _, r := range cands[:min(len(cands), maxDomainTries)] {
			mark := st.Checkpoint()
			if binds := g.placeGroups(g.groups(l, r.d)); len(binds) >= g.need {
				return binds, true
			}
			st.Rollback(mark)
		}
	}
	return nil, false
}

// groups lists the node sets to fill, in order, to place the gang inside
// domain d of level l (the cluster for -1): the domain itself at or below
// the preferred level, else its sub-domains, those holding most of the
// gang first, each split the same way down to the preferred level, and
// last its members without the next level's key.
func (g *gangTopo) groups(l int, d int32) [][]int32 {
	if g.pref < 0 || l >= g.pref {
		return [][]int32{g.members(l, d)}
	}
	var kids, loose []int32
	if l < 0 {
		kids, loose = g.x.top, g.x.topLoose
	} else {
		kids, loose = g.x.doms[l][d].children, g.x.doms[l][d].loose
	}
	rs := make([]ranked, 0, len(kids))
	for _, ch := range kids {
		fit, total := g.holds(g.x.doms[l+1][ch].members)
		if fit > 0 {
			rs = append(rs, ranked{ch, fit, total})
		}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		if x := cmp.Compare(b.fit, a.fit); x != 0 {
			return x
		}
		return cmp.Compare(a.total, b.total)
	})
	var out [][]int32
	for _, r := range rs {
		out = append(out, g.groups(l+1, r.d)...)
	}
	if len(loose) > 0 {
		out = append(out, loose)
	}
	return out
}

// placeGroups places what it can of the gang on the node sets in order,
// each slice inside one domain of the slice level within one set, and
// returns the binds in pod order; the caller rolls back a placement that
// falls short.
func (g *gangTopo) placeGroups(groups [][]int32) []model.Bind {
	type placed struct {
		k int
		b model.Bind
	}
	var out []placed
	for i, sl := range g.slices {
		for _, grp := range groups {
			if bs, ok := g.placeSlice(sl, g.slicePin[i], grp); ok {
				for i, k := range sl {
					out = append(out, placed{k, bs[i]})
				}
				break
			}
		}
	}
	// A set that refused a pod of one shape refuses the next one of that
	// shape: the gang only takes room as it goes.
	first := make([]int, len(g.shapes))
	for _, k := range g.loose {
		s := g.shapeOf[k]
		for gi := first[s]; gi < len(groups); gi++ {
			if b, ok := g.placePod(k, groups[gi]); ok {
				out = append(out, placed{k, b})
				break
			}
			first[s] = gi + 1
		}
	}
	slices.SortFunc(out, func(a, b placed) int { return cmp.Compare(a.k, b.k) })
	binds := make([]model.Bind, len(out))
	for i := range out {
		binds[i] = out[i].b
	}
	return binds
}

// placePod places pod k on the best node of nodes (nil: any node) and
// assigns it; a pod with alternatives (model.Request.FirstOf) takes the
// first that places there, as cycle.placeOne does on the whole cluster.
func (g *gangTopo) placePod(k int, nodes []int32) (model.Bind, bool) {
	c, pod := g.c, &g.p.g.Pods[k]
	for alt := range max(1, len(pod.Request.FirstOf)) {
		req := pod.Request.Alt(alt)
		var o placement.Option
		var ok bool
		if nodes == nil {
			o, ok = c.s.placer.Place(req)
			ok = ok && !g.avoid[o.Node]
		} else {
			o, ok = c.s.placer.PlaceIn(req, nodes, g.avoid)
		}
		if !ok || c.s.st.Assign(o.Node, req, o.Shares) != nil {
			continue
		}
		return model.Bind{Pod: pod.Name, Group: g.p.g.Name, Node: c.s.nodes[o.Node].Name, NodeIndex: o.Node, GPUs: o.Shares, Alternative: alt,
			Volumes: c.s.st.LastVolumes()}, true
	}
	return model.Bind{}, false
}

// placeSlice places the pods of one slice, all inside one domain of the
// slice level within nodes (nil: anywhere), that which fits it best
// first, or inside domain pin where its running members sit (pin >= 0;
// noSliceDomain: nowhere); it assigns them all or none.
func (g *gangTopo) placeSlice(sl []int, pin int32, nodes []int32) ([]model.Bind, bool) {
	st := g.c.s.st
	doms := g.sliceDomains(nodes)
	switch {
	case pin == noSliceDomain:
		return nil, false
	case pin >= 0:
		if !slices.Contains(doms, pin) {
			return nil, false
		}
		doms = []int32{pin}
	}
	need := map[int]int{}
	for _, k := range sl {
		need[g.shapeOf[k]]++
	}
	rooms := make([]func(int) int, len(g.shapes))
	for s := range need {
		rooms[s] = g.c.s.placer.Room(g.shapes[s].req)
	}
	var rs []ranked
	for _, d := range doms {
		fit, total := 0, 0
		for s, k := range need {
			sum := 0
			for _, n := range g.x.doms[g.slice][d].members {
				sum += rooms[s](int(n))
			}
			fit += min(sum, k)
			total += sum
		}
		if fit >= len(sl) {
			rs = append(rs, ranked{d, fit, total})
		}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(a.total, b.total) })
	for _, r := range rs[:min(len(rs), maxDomainTries)] {
		mark := st.Checkpoint()
		var binds []model.Bind
		for _, k := range sl {
			b, ok := g.placePod(k, g.x.doms[g.slice][r.d].members)
			if !ok {
				break
			}
			binds = append(binds, b)
		}
		if len(binds) == len(sl) {
			return binds, true
		}
		st.Rollback(mark)
	}
	return nil, false
}

// sliceDomains lists the domains of the slice level inside nodes (nil:
// all of them). A set the gang fills is a domain of a level at or above
// the slice level, or the nodes of one without the next key, so every
// such domain lies wholly inside it.
func (g *gangTopo) sliceDomains(nodes []int32) []int32 {
	if nodes == nil {
		out := make([]int32, len(g.x.doms[g.slice]))
		for d := range out {
			out[d] = int32(d)
		}
		return out
	}
	var out []int32
	for _, n := range nodes {
		if d := g.x.dom[g.slice][n]; d >= 0 && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// keepsTopology reports whether a plan made earlier (a hold's) still has
// the gang's required domain and each slice inside one domain on the
// nodes as they are now.
func (g *gangTopo) keepsTopology(plan []model.Bind) bool {
	if g.stuck {
		return false
	}
	at := map[string]int{}
	for _, b := range plan {
		at[b.Pod] = b.NodeIndex
	}
	same := func(l int, nodes []int) bool {
		d := int32(-1)
		for _, n := range nodes {
			x := g.x.dom[l][n]
			if x < 0 || d >= 0 && x != d {
				return false
			}
			d = x
		}
		return true
	}
	if g.req >= 0 {
		var nodes []int
		for _, b := range plan {
			nodes = append(nodes, b.NodeIndex)
		}
		if !same(g.req, nodes) || g.pin >= 0 && len(nodes) > 0 && g.x.dom[g.req][nodes[0]] != g.pin {
			return false
		}
	}
	for i, sl := range g.slices {
		var nodes []int
		for _, k := range sl {
			if n, ok := at[g.p.g.Pods[k].Name]; ok {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) != 0 && (len(nodes) != len(sl) || !same(g.slice, nodes)) {
			return false
		}
		if pin := g.slicePin[i]; pin != -1 && len(nodes) != 0 && g.x.dom[g.slice][nodes[0]] != pin {
			return false
		}
	}
	return true
}
