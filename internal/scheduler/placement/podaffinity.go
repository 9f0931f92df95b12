package placement

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Inter-pod affinity, anti-affinity and topology spread (model.PodAffinity,
// model.SpreadConstraint) need to know, for a node, how many pods of some
// kind run in its topology domain. podIndex keeps that as counts per
// domain, updated by every Assign and Release (and so undone by Rollback),
// so that checking a node costs a few array reads, never a look at its
// pods:
//
//   - label sets: the pods by namespace, labels and whether they are
//     terminating, and on which nodes they are; every pod is in one, so
//     that a counter made later can count the pods already placed;
//   - counters: for one selection of pods (terms that must all match, or a
//     spread constraint's selector in a namespace) and one topology key,
//     the pods per domain; made the first time a request asks and kept up
//     to date while in use;
//   - holders: for one term of running pods' own affinity (the symmetric
//     part: a running pod's anti-affinity repels a newcomer), how many pods
//     that carry it run per domain.
//
// What a check costs thus grows with the constrained requests and their
// terms, not with pods times nodes.
type podIndex struct {
	keys       map[string]*topoKey
	sets       map[string]*labelSet
	plain      *labelSet // pods of no namespace and no labels
	setList    []*labelSet
	counters   map[string]*counter
	holders    map[string]*holder
	holderList []*holder
	// holderGen changes when a holder is made or dropped: views made
	// before then are stale.
	holderGen int
	views     map[*model.Request]*view
	commits   int
	buf       []byte
	labelKeys []string
}

// topoKey is one topology key's domain of every node: an index into the
// key's distinct values, -1 for a node without the label.
type topoKey struct {
	dom    []int32
	values int
	// ids numbers the key's values (dom's entries).
	ids map[string]int32
}

// id returns value v's index, numbering a value not seen before.
func (k *topoKey) id(v string) int32 {
	id, seen := k.ids[v]
	if !seen {
		id = int32(k.values)
		k.ids[v] = id
		k.values++
	}
	return id
}

// labelSet is the pods of one namespace and label set, terminating
// (model.Request.Terminating) or not.
type labelSet struct {
	ns          string
	labels      map[string]string
	terminating bool
	pods        int32
	// onNode counts the set's pods per node; the set of pods with no
	// namespace and no labels, which the simulator's pods all are, counts
	// them in dense instead (one per node), which costs no hashing.
	onNode   map[int32]int32
	dense    []int32
	counters []*counter
}

// counter counts the pods a selection matches per domain of its key.
type counter struct {
	id    string
	terms []model.PodAffinityTerm // all must match
	key   *topoKey
	count []int32 // per domain
	total int32
	// For spread constraints, which count no terminating pod (spread):
	// the nodes whose pods count, the domains they make up, and how many
	// of those domains hold each number of pods, for the least.
	spread   bool
	eligible []bool
	domOK    []bool
	domains  int32
	hist     []int32
	least    int32
	used     int
}

// holderKind is which of a running pod's terms a holder counts.
type holderKind byte

const (
	holdRequiredAnti holderKind = iota
	holdRequired
	holdPreferred
	holdPreferredAnti
)

// holder counts, per domain, the pods that carry one term.
type holder struct {
	kind  holderKind
	term  model.PodAffinityTerm
	key   *topoKey
	count []int32
	live  int32
}

func newPodIndex() *podIndex {
	return &podIndex{keys: map[string]*topoKey{}, sets: map[string]*labelSet{}, counters: map[string]*counter{},
		holders: map[string]*holder{}, views: map[*model.Request]*view{}}
}

// key returns the domains of topology key name, working them out the
// first time.
func (x *podIndex) key(s *State, name string) *topoKey {
	if k := x.keys[name]; k != nil {
		return k
	}
	k := &topoKey{dom: make([]int32, len(s.Nodes)), ids: map[string]int32{}}
	for i := range s.Nodes {
		v, ok := DomainValue(s.Nodes[i].Node, name)
		if !ok {
			k.dom[i] = -1
			continue
		}
		k.dom[i] = k.id(v)
	}
	x.keys[name] = k
	return k
}

// relabel follows node i's labels and domains after they changed; the
// node must hold no pod the index counts. Each key's domain of the node is
// read again (a value not seen before is a new domain, counted from 0);
// counters and holders keep their counts, which the node added nothing
// to. Spread counters also depend on which nodes and domains are eligible
// (the node's labels and every key of the request), so they go and are
// made again, from the label sets, when next asked.
func (x *podIndex) relabel(s *State, i int) {
	for name, k := range x.keys {
		d := int32(-1)
		if v, ok := DomainValue(s.Nodes[i].Node, name); ok {
			d = k.id(v)
		}
		k.dom[i] = d
	}
	dropped := false
	for id, c := range x.counters {
		if c.spread {
			delete(x.counters, id)
			dropped = true
			continue
		}
		for len(c.count) < c.key.values {
			c.count = append(c.count, 0)
		}
	}
	for _, h := range x.holders {
		for len(h.count) < h.key.values {
			h.count = append(h.count, 0)
		}
	}
	if dropped {
		for _, ls := range x.setList {
			ls.counters = slices.DeleteFunc(ls.counters, func(c *counter) bool { return x.counters[c.id] != c })
		}
	}
	clear(x.views)
	x.holderGen++
}

// set returns the label set of req's pod.
func (x *podIndex) set(s *State, req *model.Request) *labelSet {
	if req.Namespace == "" && len(req.Labels) == 0 && !req.Terminating {
		if x.plain == nil {
			x.plain = x.newSet("", nil, false, "")
			x.plain.onNode, x.plain.dense = nil, make([]int32, len(s.Nodes))
		}
		return x.plain
	}
	ks := x.labelKeys[:0]
	for k := range req.Labels {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	x.labelKeys = ks
	b := append(x.buf[:0], 'L')
	if req.Terminating {
		b[0] = 'T'
	}
	b = append(b, req.Namespace...)
	for _, k := range ks {
		b = append(b, 0)
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, req.Labels[k]...)
	}
	x.buf = b
	if ls := x.sets[string(b)]; ls != nil {
		return ls
	}
	return x.newSet(req.Namespace, req.Labels, req.Terminating, string(b))
}

func (x *podIndex) newSet(ns string, labels map[string]string, terminating bool, id string) *labelSet {
	ls := &labelSet{ns: ns, labels: labels, terminating: terminating, onNode: map[int32]int32{}}
	for _, c := range x.counters {
		if c.counts(ls) {
			ls.counters = append(ls.counters, c)
		}
	}
	if id != "" {
		x.sets[id] = ls
	}
	x.setList = append(x.setList, ls)
	return ls
}

// apply counts (sign 1) or uncounts (-1) req's pod on node i.
func (x *podIndex) apply(s *State, i int, req *model.Request, sign int32) {
	ls := x.set(s, req)
	ls.pods += sign
	if ls.dense != nil {
		ls.dense[i] += sign
	} else if n := ls.onNode[int32(i)] + sign; n == 0 {
		delete(ls.onNode, int32(i))
	} else {
		ls.onNode[int32(i)] = n
	}
	for _, c := range ls.counters {
		c.add(i, sign)
	}
	if a := req.Affinity; a != nil {
		x.hold(s, i, holdRequiredAnti, a.RequiredAnti, sign)
		x.hold(s, i, holdRequired, a.Required, sign)
		x.hold(s, i, holdPreferred, a.Preferred, sign)
		x.hold(s, i, holdPreferredAnti, a.PreferredAnti, sign)
	}
}

func (x *podIndex) hold(s *State, i int, kind holderKind, terms []model.PodAffinityTerm, sign int32) {
	for k := range terms {
		t := &terms[k]
		b := appendTerm(append(x.buf[:0], byte(kind)), t)
		b = binary.AppendVarint(b, int64(t.Weight))
		x.buf = b
		h := x.holders[string(b)]
		if h == nil {
			key := x.key(s, t.TopologyKey)
			h = &holder{kind: kind, term: *t, key: key, count: make([]int32, key.values)}
			x.holders[string(b)] = h
			x.holderList = append(x.holderList, h)
			x.holderGen++
		}
		h.live += sign
		if d := h.key.dom[i]; d >= 0 {
			h.count[d] += sign
		}
	}
}

// appendTerm appends a canonical encoding of t (its weight aside).
func appendTerm(b []byte, t *model.PodAffinityTerm) []byte {
	b = appendString(b, t.TopologyKey)
	if t.AllNamespaces {
		b = append(b, 1)
	} else {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(t.Namespaces)))
		for _, ns := range t.Namespaces {
			b = appendString(b, ns)
		}
	}
	return appendSelector(b, t.Selector)
}

func appendSelector(b []byte, s *model.LabelSelector) []byte {
	if s == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = appendMap(b, s.MatchLabels)
	b = binary.AppendUvarint(b, uint64(len(s.MatchExpressions)))
	for _, r := range s.MatchExpressions {
		b = appendString(appendString(b, r.Key), r.Operator)
		b = binary.AppendUvarint(b, uint64(len(r.Values)))
		for _, v := range r.Values {
			b = appendString(b, v)
		}
	}
	return b
}

func appendMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(appendString(b, k), m[k])
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// counts reports whether the pods of ls count in c: they match its terms,
// and, for a spread constraint, are not terminating.
func (c *counter) counts(ls *labelSet) bool {
	return (!c.spread || !ls.terminating) && c.matches(ls.ns, ls.labels)
}

func (c *counter) matches(ns string, labels map[string]string) bool {
	for k := range c.terms {
		if !c.terms[k].Matches(ns, labels) {
			return false
		}
	}
	return true
}

// add counts n more pods on node i.
func (c *counter) add(i int, n int32) {
	d := c.key.dom[i]
	if d < 0 || (c.eligible != nil && !c.eligible[i]) {
		return
	}
	old := c.count[d]
	c.count[d] = old + n
	c.total += n
	if c.domOK == nil || !c.domOK[d] {
		return
	}
	now := old + n
	for int(now) >= len(c.hist) {
		c.hist = append(c.hist, 0)
	}
	c.hist[old]--
	c.hist[now]++
	switch {
	case now < c.least:
		c.least = now
	case old == c.least && c.hist[old] == 0:
		for c.least = old + 1; c.hist[c.least] == 0; c.least++ {
		}
	}
}

// counter returns the counter of the pods that match every term, over the
// domains of key; for a spread constraint, eligible says which nodes
// count (nil: every node with the key).
func (x *podIndex) counter(s *State, id []byte, terms []model.PodAffinityTerm, keyName string, eligible func(i int) bool) *counter {
	if c := x.counters[string(id)]; c != nil {
		c.used = x.commits
		return c
	}
	key := x.key(s, keyName)
	c := &counter{id: string(id), terms: terms, key: key, count: make([]int32, key.values), used: x.commits}
	if eligible != nil {
		c.spread = true
		c.eligible = make([]bool, len(s.Nodes))
		c.domOK = make([]bool, key.values)
		for i := range s.Nodes {
			if d := key.dom[i]; d >= 0 && eligible(i) {
				c.eligible[i] = true
				if !c.domOK[d] {
					c.domOK[d] = true
					c.domains++
				}
			}
		}
		c.hist = []int32{c.domains}
		c.least = 0
		if c.domains == 0 {
			c.least = math.MaxInt32
		}
	}
	x.counters[string(id)] = c
	for _, ls := range x.setList {
		if c.counts(ls) {
			ls.counters = append(ls.counters, c)
			for node, n := range ls.onNode {
				c.add(int(node), n)
			}
			for node, n := range ls.dense {
				if n != 0 {
					c.add(node, n)
				}
			}
		}
	}
	return c
}

// commit ends a cycle: views point at the cycle's requests and go; sets
// without pods, holders no pod carries and counters no request asked for
// in a while go too.
func (x *podIndex) commit() {
	x.commits++
	clear(x.views)
	if x.commits%counterIdle != 0 {
		return
	}
	dropped := false
	for id, c := range x.counters {
		if x.commits-c.used > counterIdle {
			delete(x.counters, id)
			dropped = true
		}
	}
	keep := x.setList[:0]
	for _, ls := range x.setList {
		if ls.pods == 0 && ls != x.plain {
			continue
		}
		if dropped {
			ls.counters = slices.DeleteFunc(ls.counters, func(c *counter) bool { return x.counters[c.id] != c })
		}
		keep = append(keep, ls)
	}
	clear(x.setList[len(keep):])
	x.setList = keep
	for id, ls := range x.sets {
		if ls.pods == 0 {
			delete(x.sets, id)
		}
	}
	hl := x.holderList[:0]
	for _, h := range x.holderList {
		if h.live != 0 {
			hl = append(hl, h)
		}
	}
	if len(hl) != len(x.holderList) {
		clear(x.holderList[len(hl):])
		x.holderList = hl
		for id, h := range x.holders {
			if h.live == 0 {
				delete(x.holders, id)
			}
		}
		x.holderGen++
	}
}

// counterIdle is how many commits a counter no request asked for is kept.
const counterIdle = 16
