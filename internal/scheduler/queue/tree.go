package queue

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// DefaultQueue takes groups that name no queue or an unknown one.
const DefaultQueue = "default"

// ErrInvalid marks an invalid queue hierarchy.
var ErrInvalid = errors.New("invalid queue hierarchy")

type node struct {
	q        model.Queue
	parent   int
	children []int
	usage    model.Resources
	demand   model.Resources
	fair     model.Resources
	// past is the queue's usage over time (Decay), per resource in
	// comps order, set by SetPast for a queue with a UsageHalfLife;
	// tilt is what it multiplies the queue's weights by (tilts).
	past [3]float64
	tilt [3]float64
}

// Tree is a validated queue hierarchy with usage and fair shares.
type Tree struct {
	scarce [3]bool
	nodes  []node
	byName map[string]int
	roots  []int
}

// New validates queues and builds the tree. A queue named DefaultQueue is
// added at the top when missing.
func New(queues []model.Queue) (*Tree, error) {
	t := &Tree{byName: map[string]int{}}
	for i, q := range queues {
		if q.Name == "" {
			return nil, fmt.Errorf("%w: queues[%d].name: must not be empty", ErrInvalid, i)
		}
		if _, dup := t.byName[q.Name]; dup {
			return nil, fmt.Errorf("%w: queue %q: defined twice", ErrInvalid, q.Name)
		}
		for _, w := range []struct {
			field string
			v     float64
		}{{"weight", q.Weight}, {"weights.milliCPU", q.Weights.MilliCPU}, {"weights.memoryMiB", q.Weights.MemoryMiB}, {"weights.gpuMilli", q.Weights.GPUMilli}} {
			if w.v < 0 || math.IsNaN(w.v) || math.IsInf(w.v, 0) {
				return nil, fmt.Errorf("%w: queue %q: %s must be a number >= 0, got %g", ErrInvalid, q.Name, w.field, w.v)
			}
		}
		if neg(q.Guaranteed) || neg(q.Limit) {
			return nil, fmt.Errorf("%w: queue %q: quotas must be >= 0", ErrInvalid, q.Name)
		}
		if q.UsageHalfLife < 0 || q.MinRuntime < 0 {
			return nil, fmt.Errorf("%w: queue %q: usageHalfLife and minRuntime must be >= 0", ErrInvalid, q.Name)
		}
		if !withinLimit(q.Guaranteed, q.Limit) {
			return nil, fmt.Errorf("%w: queue %q: guaranteed %+v is above its own limit %+v", ErrInvalid, q.Name, q.Guaranteed, q.Limit)
		}
		t.byName[q.Name] = len(t.nodes)
		t.nodes = append(t.nodes, node{q: q, parent: -1, tilt: [3]float64{1, 1, 1}})
	}
	if _, ok := t.byName[DefaultQueue]; !ok {
		t.byName[DefaultQueue] = len(t.nodes)
		t.nodes = append(t.nodes, node{q: model.Queue{Name: DefaultQueue}, parent: -1, tilt: [3]float64{1, 1, 1}})
	}
	for i := range t.nodes {
		p := t.nodes[i].q.Parent
		if p == "" {
			t.roots = append(t.roots, i)
			continue
		}
		pi, ok := t.byName[p]
		if !ok {
			return nil, fmt.Errorf("%w: queue %q: parent %q does not exist", ErrInvalid, t.nodes[i].q.Name, p)
		}
		t.nodes[i].parent = pi
		t.nodes[pi].children = append(t.nodes[pi].children, i)
	}
	for i := range t.nodes {
		seen := map[int]bool{}
		for j := i; j >= 0; j = t.nodes[j].parent {
			if seen[j] {
				return nil, fmt.Errorf("%w: queue %q: its parents form a cycle", ErrInvalid, t.nodes[i].q.Name)
			}
			seen[j] = true
		}
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		var sum model.Resources
		for _, c := range n.children {
			cq := t.nodes[c].q
			sum = sum.Add(cq.Guaranteed)
			if !withinLimit(cq.Limit, n.q.Limit) || !withinLimit(cq.Guaranteed, n.q.Limit) {
				return nil, fmt.Errorf("%w: queue %q: quota above its parent %q's limit %+v", ErrInvalid, cq.Name, n.q.Name, n.q.Limit)
			}
		}
		if len(n.children) > 0 && n.q.Guaranteed != (model.Resources{}) && !sum.Fits(n.q.Guaranteed) {
			return nil, fmt.Errorf("%w: queue %q: children's guaranteed quotas sum to %+v, above the parent's %+v", ErrInvalid, n.q.Name, sum, n.q.Guaranteed)
		}
	}
	return t, nil
}

func neg(r model.Resources) bool { return r.MilliCPU < 0 || r.MemoryMiB < 0 || r.GPUMilli < 0 }

// withinLimit reports whether r fits limit, where a zero limit component
// means unlimited.
func withinLimit(r, limit model.Resources) bool {
	ok := func(v, l int64) bool { return l == 0 || v <= l }
	return ok(r.MilliCPU, limit.MilliCPU) && ok(r.MemoryMiB, limit.MemoryMiB) && ok(r.GPUMilli, limit.GPUMilli)
}

// Len is the number of queues.
func (t *Tree) Len() int { return len(t.nodes) }

// Name returns queue i's name.
func (t *Tree) Name(i int) string { return t.nodes[i].q.Name }

// Spec returns queue i as given.
func (t *Tree) Spec(i int) *model.Queue { return &t.nodes[i].q }

// Leaf returns the index of the queue named name, or of DefaultQueue when
// there is none.
func (t *Tree) Leaf(name string) int {
	if i, ok := t.byName[name]; ok {
		return i
	}
	return t.byName[DefaultQueue]
}

// Usage returns queue i's usage (its subtree's).
func (t *Tree) Usage(i int) model.Resources { return t.nodes[i].usage }

// FairShare returns queue i's fair share from the last ComputeFairShares.
func (t *Tree) FairShare(i int) model.Resources { return t.nodes[i].fair }

// Guaranteed returns queue i's guaranteed quota.
func (t *Tree) Guaranteed(i int) model.Resources { return t.nodes[i].q.Guaranteed }

// AddUsage adds r (negative to remove) to queue i and its ancestors.
func (t *Tree) AddUsage(i int, r model.Resources) {
	for j := i; j >= 0; j = t.nodes[j].parent {
		t.nodes[j].usage = t.nodes[j].usage.Add(r)
	}
}

// AddDemand adds pending demand r to queue i and its ancestors.
func (t *Tree) AddDemand(i int, r model.Resources) {
	for j := i; j >= 0; j = t.nodes[j].parent {
		t.nodes[j].demand = t.nodes[j].demand.Add(r)
	}
}

// Admits reports whether queue i and every ancestor stay within their
// limits after taking r more.
func (t *Tree) Admits(i int, r model.Resources) bool {
	for j := i; j >= 0; j = t.nodes[j].parent {
		if !withinLimit(t.nodes[j].usage.Add(r), t.nodes[j].q.Limit) {
			return false
		}
	}
	return true
}

// LimitBelow returns the first queue on the path from i to its root whose
// limit r alone exceeds, whatever that queue's usage: a group that needs r
// admitted can never start there until the limit or the group changes. ok
// is false when every limit on the path holds r.
func (t *Tree) LimitBelow(i int, r model.Resources) (q int, ok bool) {
	for j := i; j >= 0; j = t.nodes[j].parent {
		if !withinLimit(r, t.nodes[j].q.Limit) {
			return j, true
		}
	}
	return -1, false
}

// ComputeFairShares divides capacity among the roots, then each queue's
// share among its children, by water filling per resource: guarantees
// first, then what is left in proportion to the queues' weights for that
// resource, up to what each wants.
func (t *Tree) ComputeFairShares(capacity model.Resources) {
	var want [3]int64
	for _, r := range t.roots {
		w := comps(t.nodes[r].usage.Add(t.nodes[r].demand))
		for k := range w {
			want[k] += w[k]
		}
	}
	c := comps(capacity)
	for k := range c {
		t.scarce[k] = want[k] > c[k]
	}
	t.divide(t.roots, capacity)
}

func (t *Tree) divide(kids []int, pool model.Resources) {
	if len(kids) == 0 {
		return
	}
	get := []func(model.Resources) int64{
		func(r model.Resources) int64 { return r.MilliCPU },
		func(r model.Resources) int64 { return r.MemoryMiB },
		func(r model.Resources) int64 { return r.GPUMilli },
	}
	shares := make([][3]float64, len(kids))
	t.tilts(kids)
	for d, g := range get {
		want := make([]float64, len(kids))
		give := make([]float64, len(kids))
		left := float64(g(pool))
		for k, c := range kids {
			n := &t.nodes[c]
			w := float64(g(n.usage) + g(n.demand))
			if l := g(n.q.Limit); l > 0 {
				w = math.Min(w, float64(l))
			}
			want[k] = w
			give[k] = math.Min(w, float64(g(n.q.Guaranteed)))
			left -= give[k]
		}
		if left < 0 { // guarantees above capacity: scale them down
			total := float64(g(pool)) - left
			for k := range give {
				give[k] *= float64(g(pool)) / total
			}
			left = 0
		}
		for left > 1e-9 {
			var wsum float64
			for k, c := range kids {
				if give[k] < want[k]-1e-9 {
					wsum += t.weight(c, d)
				}
			}
			if wsum == 0 {
				break
			}
			used := 0.0
			for k, c := range kids {
				if give[k] < want[k]-1e-9 {
					add := math.Min(left*t.weight(c, d)/wsum, want[k]-give[k])
					give[k] += add
					used += add
				}
			}
			left -= used
			if used < 1e-9 {
				break
			}
		}
		for k := range kids {
			shares[k][d] = give[k]
		}
	}
	for k, c := range kids {
		t.nodes[c].fair = model.Resources{MilliCPU: int64(shares[k][0]), MemoryMiB: int64(shares[k][1]), GPUMilli: int64(shares[k][2])}
		t.divide(t.nodes[c].children, t.nodes[c].fair)
	}
}

// weight returns queue i's weight for resource k as fair shares and
// turns use it: its Queue's (weight) times its tilt from its usage over
// time (tilts; 1 without a UsageHalfLife).
func (t *Tree) weight(i, k int) float64 { return weight(&t.nodes[i].q, k) * t.nodes[i].tilt[k] }

// weight returns q's weight for resource k (comps order: milli-CPU,
// memory, milli-GPU): its per-resource weight, else its Weight, else 1.
func weight(q *model.Queue, k int) float64 {
	switch w := [3]float64{q.Weights.MilliCPU, q.Weights.MemoryMiB, q.Weights.GPUMilli}; {
	case w[k] != 0:
		return w[k]
	case q.Weight != 0:
		return q.Weight
	}
	return 1
}

// Over is how far queue i's usage plus extra is above its fair share: the
// largest usage/fairShare over resources the queue uses (+Inf when it uses
// a resource it has no share of, 0 when it uses nothing).
func (t *Tree) Over(i int, extra model.Resources) float64 {
	u, f := t.nodes[i].usage.Add(extra), t.nodes[i].fair
	out := 0.0
	for _, p := range [][2]int64{{u.MilliCPU, f.MilliCPU}, {u.MemoryMiB, f.MemoryMiB}, {u.GPUMilli, f.GPUMilli}} {
		switch {
		case p[0] <= 0:
		case p[1] <= 0:
			return math.Inf(1)
		default:
			out = math.Max(out, float64(p[0])/float64(p[1]))
		}
	}
	return out
}

// DominantShare is queue i's weighted dominant resource share of capacity:
// max over resources r of usage(r) / (capacity(r) * weight(r)).
func (t *Tree) DominantShare(i int, capacity model.Resources) float64 {
	return t.DominantShareWith(i, model.Resources{}, capacity)
}

// DominantShareWith is DominantShare with extra added to queue i's usage.
func (t *Tree) DominantShareWith(i int, extra, capacity model.Resources) float64 {
	u, c := comps(t.nodes[i].usage.Add(extra)), comps(capacity)
	s := 0.0
	for k := range u {
		if c[k] > 0 {
			s = math.Max(s, float64(u[k])/(float64(c[k])*t.weight(i, k)))
		}
	}
	return s
}

// Path returns queue i and its ancestors, leaf first.
func (t *Tree) Path(i int) []int {
	var out []int
	for j := i; j >= 0; j = t.nodes[j].parent {
		out = append(out, j)
	}
	return out
}

// Related reports whether queues a and b are the same or one is an
// ancestor of the other.
func (t *Tree) Related(a, b int) bool { return t.within(a, b) || t.within(b, a) }

// within reports whether queue a is b or one of b's ancestors.
func (t *Tree) within(a, b int) bool {
	for j := b; j >= 0; j = t.nodes[j].parent {
		if j == a {
			return true
		}
	}
	return false
}

func comps(r model.Resources) [3]int64 { return [3]int64{r.MilliCPU, r.MemoryMiB, r.GPUMilli} }

// FitsFairShare reports whether extra needs a scarce resource (one the
// queues want more of than the cluster has) and queue i stays at or below
// its fair share in every scarce resource extra uses, after taking it.
func (t *Tree) FitsFairShare(i int, extra model.Resources) bool {
	u, f, e := comps(t.nodes[i].usage), comps(t.nodes[i].fair), comps(extra)
	contended := false
	for k := range e {
		if e[k] > 0 && t.scarce[k] {
			contended = true
			if u[k]+e[k] > f[k] {
				return false
			}
		}
	}
	return contended
}

// KeepsFairShare reports whether gone uses a scarce resource and queue i
// stays at or above its fair share in every scarce resource gone uses,
// after giving it up.
func (t *Tree) KeepsFairShare(i int, gone model.Resources) bool {
	u, f, g := comps(t.nodes[i].usage), comps(t.nodes[i].fair), comps(gone)
	contended := false
	for k := range g {
		if g[k] > 0 && t.scarce[k] {
			contended = true
			if u[k]-g[k] < f[k] {
				return false
			}
		}
	}
	return contended
}

// AboveFairShare reports whether queue i uses more than its fair share of
// some scarce resource: only then can it give anything up and stay at or
// above its fair share (KeepsFairShare).
func (t *Tree) AboveFairShare(i int) bool {
	u, f := comps(t.nodes[i].usage), comps(t.nodes[i].fair)
	for k := range u {
		if t.scarce[k] && u[k] > f[k] {
			return true
		}
	}
	return false
}

// ComparePriority orders queues a and b by their Priority where their
// branches part (the two siblings, or roots, on the paths to a and b): it
// is negative when a's branch has the higher priority, positive when b's
// has, and 0 when they are equal or one queue contains the other.
func (t *Tree) ComparePriority(a, b int) int {
	var pa, pb [16]int
	x, y := t.rootPath(a, pa[:0]), t.rootPath(b, pb[:0])
	for k := 0; k < len(x) && k < len(y); k++ {
		if x[k] != y[k] {
			return cmp.Compare(t.nodes[y[k]].q.Priority, t.nodes[x[k]].q.Priority)
		}
	}
	return 0
}

// rootPath appends queue i's path from its root to i to buf.
func (t *Tree) rootPath(i int, buf []int) []int {
	for j := i; j >= 0; j = t.nodes[j].parent {
		buf = append(buf, j)
	}
	slices.Reverse(buf)
	return buf
}

// IsLeaf reports whether queue i has no child queues.
func (t *Tree) IsLeaf(i int) bool { return len(t.nodes[i].children) == 0 }

// BorrowedGPU is how far leaf queue i's GPU usage is above its GPU
// guarantee (negative when below).
func (t *Tree) BorrowedGPU(i int) int64 {
	return t.nodes[i].usage.GPUMilli - t.nodes[i].q.Guaranteed.GPUMilli
}

// FitsGuarantee reports whether leaf queue i may reclaim its GPU guarantee
// for extra: extra uses GPUs, i's GPU usage after taking extra stays within
// its GPU guarantee, and i stays at or below its fair share in every scarce
// resource extra uses (so that taking extra adds to no queue's excess over
// its fair share).
func (t *Tree) FitsGuarantee(i int, extra model.Resources) bool {
	n := &t.nodes[i]
	if !t.IsLeaf(i) || extra.GPUMilli <= 0 || n.usage.GPUMilli+extra.GPUMilli > n.q.Guaranteed.GPUMilli {
		return false
	}
	u, f, e := comps(n.usage), comps(n.fair), comps(extra)
	for k := range e {
		if e[k] > 0 && t.scarce[k] && u[k]+e[k] > f[k] {
			return false
		}
	}
	return true
}

// KeepsGuarantee reports whether leaf queue i may give up gone to a
// guarantee reclaim: gone uses GPUs and i's GPU usage after giving it up
// stays at or above i's GPU guarantee (i was borrowing at least gone).
func (t *Tree) KeepsGuarantee(i int, gone model.Resources) bool {
	n := &t.nodes[i]
	return t.IsLeaf(i) && gone.GPUMilli > 0 && n.usage.GPUMilli-gone.GPUMilli >= n.q.Guaranteed.GPUMilli
}

// Bounds of a queue's tilt (tilts): a queue that used nothing lately
// counts twice its weight, one that used everything a sixteenth of it.
const (
	maxTilt = 2.0
	minTilt = 1.0 / 16
)

// SetPast records queue i's usage over time (Decay's result) for the next
// ComputeFairShares. Only a queue with a UsageHalfLife is tilted by it.
func (t *Tree) SetPast(i int, past model.QueueUsage) {
	t.nodes[i].past = [3]float64{past.MilliCPU, past.MemoryMiB, past.GPUMilli}
}

// tilts sets, resource by resource, the tilt of each of the siblings kids
// that has a UsageHalfLife, from how their usage over time (past) compares
// with their weights: a sibling's share of the past usage p (of the
// siblings with a half-life) against its share of their weights w gives
// the tilt 2^(1 - p/w), clamped to [minTilt, maxTilt]. A queue that used
// exactly its weight's share lately keeps its weight, as do all when none
// used anything; one that used none counts twice; one that used twice its
// share counts half. Siblings without a half-life keep tilt 1.
// The tilt is a continuous function of the past usage, which changes only
// as time passes (Decay), never within a cycle.
func (t *Tree) tilts(kids []int) {
	for k := range 3 {
		var pastSum, wSum float64
		for _, c := range kids {
			n := &t.nodes[c]
			n.tilt[k] = 1
			if n.q.UsageHalfLife > 0 {
				pastSum += n.past[k]
				wSum += weight(&n.q, k)
			}
		}
		if pastSum <= 0 || wSum <= 0 {
			continue
		}
		for _, c := range kids {
			n := &t.nodes[c]
			if n.q.UsageHalfLife <= 0 {
				continue
			}
			p, w := n.past[k]/pastSum, weight(&n.q, k)/wSum
			n.tilt[k] = math.Min(maxTilt, math.Max(minTilt, math.Exp2(1-p/w)))
		}
	}
}

// Decay advances a queue's usage over time, prev as of prev.At, to now,
// with the usage the queue holds now taken as its usage since prev.At:
// each resource becomes prev*a + usage*(1-a), a = 2^(-(now-prev.At)/halfLife),
// the average of the usage over time weighted by 2^(-age/halfLife). A prev
// of another queue, from the future, or not finite (it is read back from
// the cluster) starts over from usage, as does a halfLife <= 0. The same
// now gives back prev unchanged, so cycles at one instant see one past.
func Decay(name string, prev *model.QueueUsage, usage model.Resources, now, halfLife int64) model.QueueUsage {
	u := [3]float64{float64(usage.MilliCPU), float64(usage.MemoryMiB), float64(usage.GPUMilli)}
	out := model.QueueUsage{Queue: name, MilliCPU: u[0], MemoryMiB: u[1], GPUMilli: u[2], At: now}
	if prev == nil || prev.Queue != name || halfLife <= 0 || prev.At > now {
		return out
	}
	p := [3]float64{prev.MilliCPU, prev.MemoryMiB, prev.GPUMilli}
	for k := range p {
		if p[k] < 0 || math.IsNaN(p[k]) || math.IsInf(p[k], 0) {
			return out
		}
	}
	a := math.Exp2(-float64(now-prev.At) / float64(halfLife))
	for k := range p {
		p[k] = p[k]*a + u[k]*(1-a)
	}
	out.MilliCPU, out.MemoryMiB, out.GPUMilli = p[0], p[1], p[2]
	return out
}
