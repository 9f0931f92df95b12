package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// evictWithin is tryEvict for a gang with a required topology level: it
// looks for victims inside one domain of that level at a time (their
// nodes only) and places the gang there, trying the domains closest to
// holding it first; other groups go to tryEvict as they are.
func (c *cycle) evictWithin(p *pending, m evictMode, forbidden bool) bool {
	g := c.topologyOf(p)
	if g == nil || g.req < 0 {
		return c.tryEvict(p, m, forbidden)
	}
	if g.stuck || c.victims(p, m).Len() == 0 {
		return false
	}
	for _, d := range c.evictDomains(p, g, m) {
		c.within, c.feasible.in, c.feasible.inID = d, g.x.dom[g.req], d
		ok := c.tryEvict(p, m, forbidden)
		c.within, c.feasible.in = -1, nil
		if ok || p.forbidden != "" {
			return ok
		}
	}
	return false
}

// evictDomains ranks the domains of g's required level for an eviction
// under m: those with room for the most of the gang first, then those
// where its victims hold the most of what the gang asks for (GPUs, or CPU
// for a gang without GPUs); only domains whose free room and victims
// together could hold the gang's least need, at most maxDomainTries.
func (c *cycle) evictDomains(p *pending, g *gangTopo, m evictMode) []int32 {
	if g.pin >= 0 {
		return []int32{g.pin}
	}
	least := leastNeed(p.g)
	weight := func(r model.Resources) int64 {
		if least.GPUMilli > 0 {
			return r.GPUMilli
		}
		return r.MilliCPU
	}
	dom := g.x.dom[g.req]
	potential := make([]int64, len(g.x.doms[g.req]))
	h := c.victims(p, m)
	for v, k := h.next(), 0; v != nil && k < 4*maxVictims*maxDomainTries; v, k = h.next(), k+1 {
		for _, ps := range v.members {
			if d := dom[ps.node]; d >= 0 {
				potential[d] += weight(ps.a.Usage())
			}
		}
	}
	g.computeRooms(nil)
	var rs []ranked
	for d := range g.x.doms[g.req] {
		dm := &g.x.doms[g.req][d]
		if potential[d] == 0 {
			continue
		}
		var free model.Resources
		for _, n := range dm.members {
			ns := &c.s.st.Nodes[n]
			free = free.Add(model.Resources{MilliCPU: ns.FreeCPU, GPUMilli: ns.FreeMilli()})
		}
		if potential[d]+weight(free) < weight(least) {
			continue
		}
		fit, _ := g.holds(dm.members)
		rs = append(rs, ranked{d: int32(d), fit: fit, total: int(potential[d])})
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		if x := cmp.Compare(b.fit, a.fit); x != 0 {
			return x
		}
		return cmp.Compare(b.total, a.total)
	})
	out := make([]int32, 0, min(len(rs), maxDomainTries))
	for _, r := range rs[:min(len(rs), maxDomainTries)] {
		out = append(out, r.d)
	}
	return out
}

// topologyReason says why a topology gang waits, by its required level
// (else its slice level): which domain came closest and how many of the
// gang's pods it has room for, and, where a domain would hold the gang
// were movable work (preemptible, lower-priority or borrowed pods) gone
// from it, that domain and those pods. A gang that only prefers a level
// fits nowhere at all, and keeps the plain reason.
func (c *cycle) topologyReason(p *pending, u *model.Unplaced) {
	g := c.topologyOf(p)
	l, what := g.req, "required"
	if l < 0 {
		l, what = g.slice, "slice"
	}
	if l < 0 {
		return
	}
	key := g.x.levels[l]
	name := levelName(key)
	// The first mention names the label too, unless it is the name.
	named := name
	if name != key {
		named = fmt.Sprintf("%s (%s)", name, key)
	}
	u.Code, u.Level = model.UnplacedNoDomain, key
	if g.stuck {
		u.Reason = fmt.Sprintf("its running pods are not all in one %s (%s), the gang's required level", name, key)
		return
	}
	if i := slices.Index(g.slicePin, noSliceDomain); i >= 0 {
		sk := g.x.levels[g.slice]
		u.Level = sk
		u.Reason = fmt.Sprintf("the running pods of its slice %s are not all in one %s (%s), the gang's slice level: the slice's pending pods cannot join them",
			p.g.Pods[g.slices[i][0]].Slice, levelName(sk), sk)
		return
	}
	if len(g.x.doms[l]) == 0 {
		u.Reason = fmt.Sprintf("no node has the label %s, the gang's %s level", key, what)
		return
	}
	st := c.s.st
	g.avoid = nil
	if g.req < 0 {
		mark := st.Checkpoint()
		placed := g.placeGroups(g.groups(-1, -1))
		st.Rollback(mark)
		u.Reason = fmt.Sprintf("no %s has room for each slice of the gang (%s): %d of its %d pods find one", named, g.podsPhrase(), len(placed), len(p.g.Pods))
		return
	}
	var set []int32
	if g.pin >= 0 {
		set = g.x.doms[l][g.pin].members
	}
	g.computeRooms(set)
	var rs []ranked
	for d := range g.x.doms[l] {
		if g.pin >= 0 && int32(d) != g.pin {
			continue
		}
		fit, total := g.holds(g.x.doms[l][d].members)
		rs = append(rs, ranked{int32(d), fit, total})
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(b.fit, a.fit) })
	best := rs[0].d
	mark := st.Checkpoint()
	room := len(g.placeGroups(g.groups(l, best)))
	st.Rollback(mark)
	u.Domain = g.x.doms[l][best].name
	u.Reason = fmt.Sprintf("no %s has room for the gang's %s; the best %s, %s, has room for %d", named, g.podsPhrase(), name, u.Domain, room)
	c.movableReason(g, rs[:min(len(rs), maxDomainTries)], u)
}

// The looks for movable pods are bounded: at most maxMovableDomains
// domains per gang, and, over a cycle, at most a quarter of the nodes (or
// minMovableLooks) looked at; the gangs past that bound keep the plain
// reason for the cycle.
const (
	maxMovableDomains = 4
	minMovableLooks   = 4096
)

// movableReason looks, in the domains given (of the gang's required
// level, closest first), for one that would hold the gang were running
// groups it could move gone: preemptible groups of its queue of lower
// priority, and groups of queues that borrow (above their fair share or
// GPU guarantee). It clears the domain's nodes one at a time, those with
// the fewest such groups first, at most maxVictims groups, until the gang
// fits; the first domain found is recorded on u with the pods to move.
// Nothing is evicted: the state is rolled back.
func (c *cycle) movableReason(g *gangTopo, rs []ranked, u *model.Unplaced) {
	st := c.s.st
	l := g.req
	// clearing is one node's movable groups, buf[from:to], and the room
	// for the gang's pods it would gain without them.
	type clearing struct {
		n        int32
		from, to int
		gain     int
	}
	for _, r := range rs[:min(len(rs), maxMovableDomains)] {
		dm := &g.x.doms[l][r.d]
		if c.movableLooks += len(dm.members); c.movableLooks > max(minMovableLooks, len(c.s.nodes)/4) {
			return
		}
		var nodes []clearing
		buf := c.movBuf[:0]
		for _, n := range dm.members {
			from := len(buf)
			c.s.looks++
			for _, ps := range c.s.run.onNode[n] {
				if rg := ps.g; rg.seen != c.s.looks {
					rg.seen = c.s.looks
					if c.movable(g.p, rg) {
						buf = append(buf, rg)
					}
				}
			}
			if len(buf) > from {
				nodes = append(nodes, clearing{n: n, from: from, to: len(buf)})
			}
		}
		c.movBuf = buf
		if len(nodes) == 0 {
			continue
		}
		// With all of them gone, would the domain have room at all, and
		// how much would each node gain?
		g.computeRooms(dm.members)
		free := make([]int, len(g.shapes))
		for k := range nodes {
			cl := &nodes[k]
			var cpu, mem int64
			shares := c.shareBuf[:0]
			for _, rg := range buf[cl.from:cl.to] {
				for _, ps := range rg.members {
					if ps.node == int(cl.n) {
						cpu, mem = cpu+ps.a.Request.MilliCPU, mem+ps.a.Request.MemoryMiB
						shares = append(shares, ps.a.GPUs...)
					}
				}
			}
			c.shareBuf = shares
			for s := range g.shapes {
				room := st.RoomFreed(int(cl.n), g.shapes[s].req, cpu, mem, shares)
				cl.gain += max(0, room-int(g.room[s][cl.n]))
				free[s] += room - int(g.room[s][cl.n])
			}
		}
		fit := 0
		for s := range g.shapes {
			sum := free[s]
			for _, n := range dm.members {
				sum += int(g.room[s][n])
			}
			fit += min(sum, g.shapes[s].pods)
		}
		if fit < g.need {
			continue
		}
		nodes = slices.DeleteFunc(nodes, func(cl clearing) bool { return cl.gain <= 0 })
		// The nodes that gain the most room per group moved first.
		slices.SortStableFunc(nodes, func(a, b clearing) int {
			return cmp.Compare((a.to-a.from)*b.gain, (b.to-b.from)*a.gain)
		})
		mark := st.Checkpoint()
		c.s.looks++
		var taken []*runningGroup
		fits := false
		for _, cl := range nodes {
			for _, rg := range buf[cl.from:cl.to] {
				if rg.seen != c.s.looks && len(taken) < maxVictims {
					rg.seen = c.s.looks
					c.release(rg)
					taken = append(taken, rg)
				}
			}
			g.computeRooms(dm.members)
			if fit, _ := g.holds(dm.members); fit < g.need {
				continue
			}
			try := st.Checkpoint()
			fits = len(g.placeGroups(g.groups(l, r.d))) >= g.need
			st.Rollback(try)
			if fits || len(taken) >= maxVictims {
				break
			}
		}
		st.Rollback(mark)
		if !fits {
			continue
		}
		var pods []string
		for _, rg := range taken {
			for _, ps := range rg.byNodeAndName() {
				pods = append(pods, ps.a.Pod)
			}
		}
		name := levelName(g.x.levels[l])
		u.Code, u.Domain = model.UnplacedFragmentedDomain, dm.name
		u.Movable = pods[:min(len(pods), maxMovableListed)]
		u.MovableMore = len(pods) - len(u.Movable)
		list := strings.Join(u.Movable, ", ")
		if u.MovableMore > 0 {
			list += fmt.Sprintf(" and %d more", u.MovableMore)
		}
		u.Reason += fmt.Sprintf("; %s %s would have room were these movable pods moved: %s", name, dm.name, list)
		return
	}
}

// movable reports whether p may, by the rules of preemption or reclaim,
// take running group rg's room.
func (c *cycle) movable(p *pending, rg *runningGroup) bool {
	if rg.queue == nil || rg.name == p.g.Name {
		return false
	}
	return c.allowed(p, rg, preempt) || c.allowed(p, rg, reclaimFair) || c.allowed(p, rg, reclaimGuarantee)
}

// podsPhrase says what the gang needs placed: "4 pods of 8 GPUs each".
func (g *gangTopo) podsPhrase() string {
	if len(g.shapes) != 1 {
		return fmt.Sprintf("%d pods", g.need)
	}
	r := g.shapes[0].req
	var each string
	switch {
	case r.GPUs == 1:
		each = "1 GPU"
	case r.GPUs > 1:
		each = fmt.Sprintf("%d GPUs", r.GPUs)
	case r.MIGSlices > 0:
		each = fmt.Sprintf("a %d-slice MIG instance", r.MIGSlices)
	case r.GPUMilli > 0:
		each = fmt.Sprintf("%d/1000 of a GPU", r.GPUMilli)
	default:
		each = describe(model.Resources{MilliCPU: r.MilliCPU, MemoryMiB: r.MemoryMiB})
	}
	if g.need == 1 {
		return "1 pod of " + each
	}
	return fmt.Sprintf("%d pods of %s each", g.need, each)
}

// levelName is how reasons name a level: its key's last part
// ("topology.kubernetes.io/zone" is "zone").
func levelName(key string) string {
	if key == cliqueLabel {
		return "NVLink domain"
	}
	if i := strings.LastIndexByte(key, '/'); i >= 0 && i+1 < len(key) {
		key = key[i+1:]
	}
	// gpuplane.io/topology-rack reads as "rack".
	if rest, ok := strings.CutPrefix(key, "topology-"); ok && rest != "" {
		return rest
	}
	return key
}

// cliqueLabel is the label NVIDIA's GPU Feature Discovery (and gpuplane's
// agent) writes with a node's NVLink domain: the nodes of one NVL72 rack
// share it.
const cliqueLabel = "nvidia.com/gpu.clique"
