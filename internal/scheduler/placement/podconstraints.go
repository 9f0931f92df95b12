package placement

import (
	"math"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Reasons the pod constraints refuse a node (Why), in the order they are
// checked: kube-scheduler's PodTopologySpread, then InterPodAffinity.
const (
	FilterSpread = "topology spread"
	// FilterPodAffinity: the node's domain holds no pod the pod's required
	// affinity asks for (or the node lacks a term's topology key).
	FilterPodAffinity = "pod affinity"
	// FilterPodAntiAffinity: the node's domain holds a pod the pod's
	// required anti-affinity repels.
	FilterPodAntiAffinity = "pod anti-affinity"
	// FilterExistingAntiAffinity: a pod in the node's domain repels this
	// one by its own required anti-affinity.
	FilterExistingAntiAffinity = "existing pods' anti-affinity"
)

// view is one request's constraints read against the index: the counters
// and holders that decide them, found once per request and cycle.
type view struct {
	gen  int
	none bool // nothing constrains the request
	// Hard spread constraints: a node must carry every key.
	spreadKeys []*topoKey
	spread     []spreadCheck
	// Required affinity: one counter per term, of the pods that match
	// every term; self when the pod matches every term itself.
	aff  []*counter
	self bool
	// Required anti-affinity, the pod's own and running pods' that match
	// the pod.
	anti     []*counter
	existing []*holder
	// Preferences: weighted counts (affinity's, with running pods'
	// terms that match the pod) and soft spread constraints.
	scores   []scoreTerm
	softKeys []*topoKey
	soft     []spreadCheck
}

type spreadCheck struct {
	c                   *counter
	maxSkew, minDomains int32
	self                int32
}

type scoreTerm struct {
	key   *topoKey
	count []int32
	w     int64
}

func (v *view) prefers() bool { return len(v.scores) > 0 || len(v.soft) > 0 }

// view returns req's constraints against the state, or nil when nothing
// constrains where req goes.
func (s *State) view(req *model.Request) *view {
	x := s.aff
	if !req.Constrained() && len(x.holderList) == 0 {
		return nil
	}
	v, ok := x.views[req]
	if !ok || v.gen != x.holderGen {
		v = x.build(s, req)
		v.none = len(v.spread) == 0 && len(v.spreadKeys) == 0 && len(v.aff) == 0 && len(v.anti) == 0 && len(v.existing) == 0 && !v.prefers()
		x.views[req] = v
	}
	if v.none {
		return nil
	}
	return v
}

func (x *podIndex) build(s *State, req *model.Request) *view {
	v := &view{gen: x.holderGen}
	for _, h := range x.holderList {
		if !h.term.Matches(req.Namespace, req.Labels) {
			continue
		}
		switch h.kind {
		case holdRequiredAnti:
			v.existing = append(v.existing, h)
		case holdRequired:
			v.scores = append(v.scores, scoreTerm{h.key, h.count, hardPodAffinityWeight})
		case holdPreferred:
			v.scores = append(v.scores, scoreTerm{h.key, h.count, int64(h.term.Weight)})
		case holdPreferredAnti:
			v.scores = append(v.scores, scoreTerm{h.key, h.count, -int64(h.term.Weight)})
		}
	}
	if a := req.Affinity; a != nil {
		if len(a.Required) > 0 {
			v.self = true
			var all []byte
			for k := range a.Required {
				all = appendTerm(all, &a.Required[k])
				v.self = v.self && a.Required[k].Matches(req.Namespace, req.Labels)
			}
			for k := range a.Required {
				key := a.Required[k].TopologyKey
				id := append(appendString([]byte{'A'}, key), all...)
				v.aff = append(v.aff, x.counter(s, id, a.Required, key, nil))
			}
		}
		one := func(t *model.PodAffinityTerm) *counter {
			return x.counter(s, appendTerm([]byte{'T'}, t), []model.PodAffinityTerm{*t}, t.TopologyKey, nil)
		}
		for k := range a.RequiredAnti {
			v.anti = append(v.anti, one(&a.RequiredAnti[k]))
		}
		for k := range a.Preferred {
			c := one(&a.Preferred[k])
			v.scores = append(v.scores, scoreTerm{c.key, c.count, int64(a.Preferred[k].Weight)})
		}
		for k := range a.PreferredAnti {
			c := one(&a.PreferredAnti[k])
			v.scores = append(v.scores, scoreTerm{c.key, c.count, -int64(a.PreferredAnti[k].Weight)})
		}
	}
	for _, soft := range []bool{false, true} {
		var keys []*topoKey
		var names []string
		for k := range req.Spread {
			if c := &req.Spread[k]; c.ScheduleAnyway == soft {
				keys = append(keys, x.key(s, c.TopologyKey))
				names = append(names, c.TopologyKey)
			}
		}
		var checks []spreadCheck
		for k := range req.Spread {
			c := &req.Spread[k]
			if c.ScheduleAnyway != soft {
				continue
			}
			id := appendString([]byte{'S'}, req.Namespace)
			id = appendSelector(appendString(id, c.TopologyKey), c.Selector)
			id = appendMap(id, c.Nodes)
			for _, n := range names {
				id = appendString(id, n)
			}
			eligible := func(i int) bool {
				for _, k := range keys {
					if k.dom[i] < 0 {
						return false
					}
				}
				labels := s.Nodes[i].Node.Labels
				for k, want := range c.Nodes {
					if got, ok := labels[k]; !ok || got != want {
						return false
					}
				}
				return true
			}
			terms := []model.PodAffinityTerm{{Selector: c.Selector, Namespaces: []string{req.Namespace}, TopologyKey: c.TopologyKey}}
			sc := spreadCheck{c: x.counter(s, id, terms, c.TopologyKey, eligible), maxSkew: c.MaxSkew, minDomains: c.MinDomains}
			if c.Selector.Matches(req.Labels) {
				sc.self = 1
			}
			checks = append(checks, sc)
		}
		if soft {
			v.softKeys, v.soft = keys, checks
		} else {
			v.spreadKeys, v.spread = keys, checks
		}
	}
	return v
}

// hardPodAffinityWeight is the weight of a running pod's required
// affinity term that matches a newcomer, in the newcomer's preferences
// (kube-scheduler's default hardPodAffinityWeight).
const hardPodAffinityWeight = 1

// check returns the first constraint of v that refuses node i as the
// state is now, or "".
func (v *view) check(i int) string {
	for _, k := range v.spreadKeys {
		if k.dom[i] < 0 {
			return FilterSpread
		}
	}
	for _, sc := range v.spread {
		c := sc.c
		least := int64(c.least)
		if c.domains < sc.minDomains {
			least = 0
		}
		if int64(c.count[c.key.dom[i]])+int64(sc.self)-least > int64(sc.maxSkew) {
			return FilterSpread
		}
	}
	if len(v.aff) > 0 {
		found, anywhere := true, false
		for _, c := range v.aff {
			d := c.key.dom[i]
			if d < 0 {
				return FilterPodAffinity
			}
			found = found && c.count[d] > 0
			anywhere = anywhere || c.total > 0
		}
		// The first pod of a group that wants to be together goes
		// anywhere with the keys, when it matches its own terms and no
		// pod of the cluster matches them yet.
		if !found && (anywhere || !v.self) {
			return FilterPodAffinity
		}
	}
	for _, c := range v.anti {
		if d := c.key.dom[i]; d >= 0 && c.count[d] > 0 {
			return FilterPodAntiAffinity
		}
	}
	for _, h := range v.existing {
		if d := h.key.dom[i]; d >= 0 && h.count[d] > 0 {
			return FilterExistingAntiAffinity
		}
	}
	return ""
}

// prefer returns, of nodes that the policy scores alike and v allows, the
// one v's preferences rank first: the sum of kube-scheduler's two
// normalized scores, InterPodAffinity's (the weights of the matching pods
// in each node's domains, scaled from the lowest to the highest over
// cands) and PodTopologySpread's (for ScheduleAnyway constraints: fewer
// matching pods in the node's domain, each constraint weighted by the log
// of its number of domains, is better). Ties go to the first of cands.
func (v *view) prefer(cands []int32) int32 {
	if len(cands) < 2 || !v.prefers() {
		return cands[0]
	}
	aff := make([]int64, len(cands))
	spread := make([]int64, len(cands))
	affMin, affMax := int64(math.MaxInt64), int64(math.MinInt64)
	spMin, spMax := int64(math.MaxInt64), int64(0)
	for k, i := range cands {
		for _, t := range v.scores {
			if d := t.key.dom[i]; d >= 0 {
				aff[k] += t.w * int64(t.count[d])
			}
		}
		affMin, affMax = min(affMin, aff[k]), max(affMax, aff[k])
		spread[k] = -1
		if !v.missingSoftKey(int(i)) {
			f := 0.0
			for _, sc := range v.soft {
				c := sc.c
				f += float64(c.count[c.key.dom[i]])*math.Log(float64(c.domains)+2) + float64(sc.maxSkew-1)
			}
			spread[k] = int64(math.Round(f))
			spMin, spMax = min(spMin, spread[k]), max(spMax, spread[k])
		}
	}
	best, bestScore := cands[0], int64(math.MinInt64)
	for k, i := range cands {
		var sc int64
		if affMax > affMin {
			sc += 100 * (aff[k] - affMin) / (affMax - affMin)
		}
		switch {
		case len(v.soft) == 0:
		case spread[k] < 0:
		case spMax == 0:
			sc += 100
		default:
			sc += 100 * (spMax + spMin - spread[k]) / spMax
		}
		if sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

func (v *view) missingSoftKey(i int) bool {
	for _, k := range v.softKeys {
		if k.dom[i] < 0 {
			return true
		}
	}
	return false
}

// Allows reports whether req's pod affinity, anti-affinity and spread
// constraints, and running pods' anti-affinity, let it go to node i as the
// state is now.
func (s *State) Allows(i int, req *model.Request) bool {
	v := s.view(req)
	return v == nil || v.check(i) == ""
}

// constraintWhy is the constraint that refuses req on node i, or "".
func (s *State) constraintWhy(i int, req *model.Request) string {
	if v := s.view(req); v != nil {
		return v.check(i)
	}
	return ""
}
