package placement

import (
	"container/heap"
	"math"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Requests with pod constraints (a view) cannot take the shape cache's
// best node as it is: whether a node is allowed depends on its identity
// (its domains) and on the pods around it, which a node signature does not
// say. The shape cache still holds every node's best option and score by
// the policy, which constraints never change; placeConstrained walks its
// max-tree from the best node down and takes the first node the
// constraints allow, or, when the request has preferences, every allowed
// node the policy scores as the best one and lets the preferences choose
// among them. A walk that has looked at many nodes finishes as one pass
// over all of them, so a constrained request costs at most a pass over the
// nodes' cached scores, usually a few steps.

// constrainedWalk is the scratch space of placeConstrained.
type constrainedWalk struct {
	heap  treeHeap
	cands []int32
}

// treeHeap holds positions of a shape cache's tree, best subtree first.
type treeHeap struct {
	c   *shapeCache
	pos []int32
}

func (h *treeHeap) Len() int { return len(h.pos) }
func (h *treeHeap) Less(a, b int) bool {
	return h.c.pick(h.c.tree[h.pos[a]], h.c.tree[h.pos[b]]) == h.c.tree[h.pos[a]]
}
func (h *treeHeap) Swap(a, b int) { h.pos[a], h.pos[b] = h.pos[b], h.pos[a] }
func (h *treeHeap) Push(x any)    { h.pos = append(h.pos, x.(int32)) }
func (h *treeHeap) Pop() any {
	x := h.pos[len(h.pos)-1]
	h.pos = h.pos[:len(h.pos)-1]
	return x
}

func (p *Placer) placeConstrained(req *model.Request, v *view) (Option, bool) {
	if !p.local {
		return p.scanConstrained(req, v)
	}
	c := p.cache(req)
	if len(c.best) == 0 {
		return Option{}, false
	}
	w := &p.walk
	cands := w.cands[:0]
	top := math.Inf(-1)
	h := &w.heap
	h.c, h.pos = c, h.pos[:0]
	if n := c.tree[1]; n >= 0 && c.best[n].opt >= 0 {
		h.pos = append(h.pos, 1)
	}
	limit := max(64, len(c.best)/16)
	for steps := 0; h.Len() > 0; steps++ {
		if steps > limit {
			cands = p.passConstrained(c, v, cands[:0])
			break
		}
		k := heap.Pop(h).(int32)
		n := c.tree[k]
		if sc := c.best[n].score; len(cands) > 0 && sc < top {
			break
		}
		if int(k) >= c.size {
			if v.check(int(n)) == "" {
				cands, top = append(cands, n), c.best[n].score
				if !v.prefers() {
					break
				}
			}
			continue
		}
		for _, ch := range [2]int32{2 * k, 2*k + 1} {
			if m := c.tree[ch]; m >= 0 && c.best[m].opt >= 0 {
				heap.Push(h, ch)
			}
		}
	}
	w.cands = cands
	if len(cands) == 0 {
		return Option{}, false
	}
	i := int(v.prefer(cands))
	return p.st.fitOptions(i, req)[c.best[i].opt], true
}

// passConstrained lists, in index order, the nodes v allows that have the
// best cached score among those it allows.
func (p *Placer) passConstrained(c *shapeCache, v *view, cands []int32) []int32 {
	top := math.Inf(-1)
	for i := range c.best {
		b := c.best[i]
		if b.opt < 0 || (len(cands) > 0 && b.score < top) || v.check(i) != "" {
			continue
		}
		if len(cands) == 0 || b.score > top {
			cands, top = cands[:0], b.score
		}
		cands = append(cands, int32(i))
	}
	return cands
}

// scanConstrained is scan for a constrained request under a policy that
// is not node-local: every allowed node's options are scored.
func (p *Placer) scanConstrained(req *model.Request, v *view) (Option, bool) {
	w := &p.walk
	cands := w.cands[:0]
	var opts []Option
	top := math.Inf(-1)
	for i := range p.st.Nodes {
		if v.check(i) != "" {
			continue
		}
		nodeBest, at := math.Inf(-1), -1
		for j, o := range p.st.fitOptions(i, req) {
			if sc := p.Score(req, &o); at < 0 || sc > nodeBest {
				nodeBest, at = sc, j
			}
		}
		switch {
		case at < 0, len(cands) > 0 && nodeBest < top:
			continue
		case len(cands) == 0 || nodeBest > top:
			cands, opts, top = cands[:0], opts[:0], nodeBest
		}
		cands = append(cands, int32(i))
		opts = append(opts, p.st.fitOptions(i, req)[at])
	}
	w.cands = cands
	if len(cands) == 0 {
		return Option{}, false
	}
	i := v.prefer(cands)
	for k, n := range cands {
		if n == i {
			return opts[k], true
		}
	}
	return Option{}, false
}
