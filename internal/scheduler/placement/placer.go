package placement

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Placer picks the best option for a request under a policy. For policies
// made only of NodeLocal scorers it keeps, per distinct request shape, the
// best score of every node and a max-tree over them, and re-scores only the
// nodes the State reports changed since it last saw that shape; node
// scores are also memoised by node signature. Other policies scan every
// node on every call.
//
// A Placer belongs to one State and one goroutine.
type Placer struct {
	st     *State
	pol    Policy
	local  bool
	mix    bool
	reqIDs map[string]int
	caches []*shapeCache
	memo   map[memoKey]memoVal
	keyBuf strings.Builder
	// walk is scratch space for requests with pod constraints.
	walk constrainedWalk
	// every lists every node's index, for PlaceExcept's look at them all.
	every []int32
	// sigEpoch is the state's signature epoch the memo was made in.
	sigEpoch uint64
	// live counts the shape caches held, at most maxShapes; tick stamps
	// each cache's last use (shapeCache.used), to drop the one unused
	// longest when another is needed.
	live, maxShapes int
	tick            uint64
	// maxShapeIDs is shapeIDLimit (tests lower it).
	maxShapeIDs int
	// tie ranks the nodes for ties between equal scores (SetTieOrder);
	// nil: by index.
	tie []int32
}

type memoKey struct{ sig, req int32 }

type memoVal struct {
	score float64
	opt   int32 // -1: does not fit
}

// shapeCache holds every node's best option for one request shape.
type shapeCache struct {
	pos  int
	best []memoVal
	tree []int32 // tree[1] is the best node; leaves at len(best)..
	size int
	// room is each node's room for the shape (Room), -1 until asked
	// since the node last changed; nil until Room is first asked.
	room []int32
	// tie is the placer's tie order when the cache was filled.
	tie []int32
	// used is the placer's tick when the cache was last read, and commit
	// the state's commits then (the cycle it was read in).
	used, commit uint64
}

// A shape cache takes room in proportion to the nodes (about 28 bytes a
// node), and pods ask for many shapes over a scheduler's life: every
// distinct CPU and memory request is one. shapeBudget bounds the node
// entries all caches hold together, so at most shapeBudget/nodes shapes
// (and never fewer than minShapes) keep a cache; past it the caches unused
// longest go, to be filled again if their shapes come back. A cache read
// in the cycle under way stays until it ends, so that a cycle placing
// more shapes than that fills each once, not once per pod. shapeIDLimit
// bounds the shapes a Placer tells apart: past it, every shape, cache and
// memo starts over.
const (
	shapeBudget  = 1 << 21
	minShapes    = 16
	shapeIDLimit = 1 << 16
)

// memoLimit bounds the signature memo; it is dropped when it grows past.
const memoLimit = 1 << 20

// NewPlacer returns a placer for st under pol.
func NewPlacer(st *State, pol Policy) (*Placer, error) {
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("creating placer: %w", err)
	}
	return &Placer{st: st, pol: pol, local: pol.nodeLocal(), mix: pol.usesPodMix(), reqIDs: map[string]int{}, memo: map[memoKey]memoVal{},
		maxShapes: max(minShapes, shapeBudget/max(1, len(st.Nodes))), maxShapeIDs: shapeIDLimit}, nil
}

// Policy returns the placer's policy.
func (p *Placer) Policy() Policy { return p.pol }

// Place returns the best option for req on the current state, or false if
// it fits nowhere. It changes nothing; the caller assigns the option.
func (p *Placer) Place(req *model.Request) (Option, bool) {
	if req.Volumes.Dynamic() {
		// What a pod's volumes take on one node changes what others
		// offer (volumes.go): such a pod is placed on a fresh look.
		return p.scan(req)
	}
	if v := p.st.view(req); v != nil {
		return p.placeConstrained(req, v)
	}
	if !p.local {
		return p.scan(req)
	}
	c := p.cache(req)
	if len(c.best) == 0 {
		return Option{}, false
	}
	i := int(c.tree[1])
	v := c.best[i]
	if v.opt < 0 {
		return Option{}, false
	}
	return p.st.fitOptions(i, req)[v.opt], true
}

// cache returns req's shape cache, brought up to date with the state.
func (p *Placer) cache(req *model.Request) *shapeCache {
	rid := p.shape(req)
	c := p.caches[rid]
	if c == nil {
		c = p.fill(req, rid)
	} else {
		c.used, c.commit = p.tick, p.st.commits
		changed, pos := p.st.Changes(c.pos)
		if len(changed) >= len(p.st.Nodes) {
			c = p.fill(req, rid)
		} else {
			for _, i := range changed {
				c.best[i] = p.nodeBest(i, req, int32(rid))
				c.update(i)
				if c.room != nil {
					c.room[i] = -1
				}
			}
			c.pos = pos
		}
	}
	return c
}

// Score returns the policy's score of one option.
func (p *Placer) Score(req *model.Request, o *Option) float64 {
	sum := 0.0
	for _, w := range p.pol.Scorers {
		if w.Weight != 0 {
			sum += w.Weight * w.Score(p.st, req, o)
		}
	}
	return sum
}

func (p *Placer) scan(req *model.Request) (Option, bool) {
	var best Option
	bestScore, found := math.Inf(-1), false
	for i := range p.st.Nodes {
		for _, o := range p.st.fitOptions(i, req) {
			if sc := p.Score(req, &o); !found || sc > bestScore {
				best, bestScore, found = o, sc, true
			}
		}
	}
	return best, found
}

func (p *Placer) shape(req *model.Request) int {
	b := &p.keyBuf
	b.Reset()
	fmt.Fprintf(b, "%d/%d/%d/%d/%d/%d/%d/%s/%s/%s/%s|", req.MilliCPU, req.MemoryMiB, req.GPUs, req.GPUMilli, req.Replicas, req.GPUMemoryMiB, req.MIGSlices, req.MIGProfile, req.ShareResource, strings.Join(req.GPUModels, ","), req.DeviceSet)
	if req.AllOfSet {
		b.WriteString("all|")
	}
	if len(req.NodeSelector) > 0 || len(req.Tolerations) > 0 {
		fmt.Fprintf(b, "%v|%v", req.NodeSelector, req.Tolerations)
	}
	if len(req.Scalars) > 0 || len(req.HostPorts) > 0 {
		b.Write(appendRequestKey(nil, req))
	}
	id, ok := p.reqIDs[b.String()]
	if !ok {
		if len(p.reqIDs) >= p.maxShapeIDs {
			p.forgetShapes()
		}
		id = len(p.reqIDs)
		p.reqIDs[b.String()] = id
		p.caches = append(p.caches, nil)
	}
	p.tick++
	return id
}

// forgetShapes starts every shape over: their ids, caches and memoised
// scores (keyed by id).
func (p *Placer) forgetShapes() {
	p.reqIDs = map[string]int{}
	p.caches, p.live = nil, 0
	p.memo = map[memoKey]memoVal{}
}

// makeRoom drops the shape caches unused longest, before another is
// filled, until fewer than maxShapes are held; none read in the cycle
// under way goes.
func (p *Placer) makeRoom() {
	for p.live >= p.maxShapes {
		oldest := -1
		for rid, c := range p.caches {
			if c != nil && c.commit != p.st.commits && (oldest < 0 || c.used < p.caches[oldest].used) {
				oldest = rid
			}
		}
		if oldest < 0 {
			return // every cache held was read in this cycle
		}
		p.caches[oldest] = nil
		p.live--
	}
}

func (p *Placer) fill(req *model.Request, rid int) *shapeCache {
	if p.caches[rid] == nil {
		p.makeRoom()
		p.live++
	}
	n := len(p.st.Nodes)
	c := &shapeCache{best: make([]memoVal, n), size: 1, tie: p.tie, used: p.tick, commit: p.st.commits}
	for c.size < n {
		c.size *= 2
	}
	c.tree = make([]int32, 2*c.size)
	for i := range p.st.Nodes {
		c.best[i] = p.nodeBest(i, req, int32(rid))
	}
	for k := range c.size {
		if k < n {
			c.tree[c.size+k] = int32(k)
		} else {
			c.tree[c.size+k] = -1
		}
	}
	for k := c.size - 1; k >= 1; k-- {
		c.tree[k] = c.pick(c.tree[2*k], c.tree[2*k+1])
	}
	_, c.pos = p.st.Changes(0)
	p.caches[rid] = c
	return c
}

// pick returns the better of two nodes; ties go to the lower index.
func (c *shapeCache) pick(a, b int32) int32 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	va, vb := c.best[a], c.best[b]
	if vb.opt >= 0 && (va.opt < 0 || vb.score > va.score || (vb.score == va.score && c.before(b, a))) {
		return b
	}
	return a
}

// before reports whether node a goes before node b among equal scores.
func (c *shapeCache) before(a, b int32) bool {
	if c.tie == nil {
		return a < b
	}
	return c.tie[a] < c.tie[b]
}

// SetTieOrder ranks the nodes for ties between equal scores: of two nodes
// the policy scores alike, the one of lower rank[i] is chosen (nil: the
// lower index). The scheduling core ranks nodes by their topology domains
// so that pods the policy places alike fill one domain before the next,
// leaving the later domains whole (doc.go of the core). The placer's
// caches are rebuilt under the new order as they are next used.
func (p *Placer) SetTieOrder(rank []int32) {
	p.tie = rank
	clear(p.caches)
	p.live = 0
}

func (c *shapeCache) update(i int) {
	k := (c.size + i) / 2
	for k >= 1 {
		c.tree[k] = c.pick(c.tree[2*k], c.tree[2*k+1])
		k /= 2
	}
}

func (p *Placer) nodeBest(i int, req *model.Request, rid int32) memoVal {
	if p.st.Nodes[i].closed {
		// Not memoised: open nodes of its signature have their place.
		return memoVal{score: math.Inf(-1), opt: -1}
	}
	sig := p.st.signature
	if p.mix {
		sig = p.st.signatureMix
	}
	key := memoKey{sig(i), rid}
	if p.sigEpoch != p.st.sigEpoch {
		// The state's signatures started over: the memo's keys name
		// signatures that are gone.
		clear(p.memo)
		p.sigEpoch = p.st.sigEpoch
	}
	if v, ok := p.memo[key]; ok {
		return v
	}
	v := memoVal{score: math.Inf(-1), opt: -1}
	opts := p.st.fitOptions(i, req)
	for j := range opts {
		if sc := p.Score(req, &opts[j]); v.opt < 0 || sc > v.score {
			v = memoVal{score: sc, opt: int32(j)}
		}
	}
	if len(p.memo) >= memoLimit {
		clear(p.memo)
	}
	p.memo[key] = v
	return v
}
