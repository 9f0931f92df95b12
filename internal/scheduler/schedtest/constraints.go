package schedtest

import (
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// Placed is a pod on a node, for PodConstraintReason.
type Placed struct {
	Node int
	Req  *model.Request
}

// PodConstraintReason says, the slow and obvious way, which required pod
// constraint refuses req on node i of nodes with the pods placed as they
// are (placement.Filter* reasons, in the order the core checks them), or
// "": an oracle for the core's index, written from kube-scheduler's
// PodTopologySpread and InterPodAffinity filters with no index at all
// (the first skips terminating pods, the second counts them).
func PodConstraintReason(nodes []model.Node, placed []Placed, req *model.Request, i int) string {
	label := func(n int, key string) (string, bool) {
		if v, ok := nodes[n].Domains[key]; ok {
			return v, true
		}
		v, ok := nodes[n].Labels[key]
		return v, ok
	}
	// PodTopologySpread, DoNotSchedule constraints.
	var hard []*model.SpreadConstraint
	for k := range req.Spread {
		if !req.Spread[k].ScheduleAnyway {
			hard = append(hard, &req.Spread[k])
		}
	}
	hasAll := func(n int) bool {
		for _, c := range hard {
			if _, ok := label(n, c.TopologyKey); !ok {
				return false
			}
		}
		return true
	}
	if len(hard) > 0 && !hasAll(i) {
		return placement.FilterSpread
	}
	for _, c := range hard {
		eligible := func(n int) bool {
			if !hasAll(n) {
				return false
			}
			for k, v := range c.Nodes {
				if got, ok := nodes[n].Labels[k]; !ok || got != v {
					return false
				}
			}
			return true
		}
		count := map[string]int{}
		for n := range nodes {
			if eligible(n) {
				v, _ := label(n, c.TopologyKey)
				count[v] += 0
			}
		}
		for _, p := range placed {
			if eligible(p.Node) && !p.Req.Terminating && p.Req.Namespace == req.Namespace && c.Selector.Matches(p.Req.Labels) {
				v, _ := label(p.Node, c.TopologyKey)
				count[v]++
			}
		}
		if len(count) == 0 {
			continue
		}
		least := -1
		for _, n := range count {
			if least < 0 || n < least {
				least = n
			}
		}
		if len(count) < int(c.MinDomains) {
			least = 0
		}
		self := 0
		if c.Selector.Matches(req.Labels) {
			self = 1
		}
		v, _ := label(i, c.TopologyKey)
		if count[v]+self-least > int(c.MaxSkew) {
			return placement.FilterSpread
		}
	}
	a := req.Affinity
	if a == nil {
		a = &model.PodAffinity{}
	}
	// InterPodAffinity: the pod's required affinity.
	matchesAll := func(ns string, labels map[string]string) bool {
		for k := range a.Required {
			if !a.Required[k].Matches(ns, labels) {
				return false
			}
		}
		return true
	}
	if len(a.Required) > 0 {
		found, anywhere := true, false
		for k := range a.Required {
			t := &a.Required[k]
			v, ok := label(i, t.TopologyKey)
			if !ok {
				return placement.FilterPodAffinity
			}
			here := false
			for _, p := range placed {
				if w, ok := label(p.Node, t.TopologyKey); ok && matchesAll(p.Req.Namespace, p.Req.Labels) {
					anywhere = true
					here = here || w == v
				}
			}
			found = found && here
		}
		if !found && (anywhere || !matchesAll(req.Namespace, req.Labels)) {
			return placement.FilterPodAffinity
		}
	}
	sameDomain := func(n int, key string) bool {
		v, ok := label(i, key)
		w, ok2 := label(n, key)
		return ok && ok2 && v == w
	}
	for k := range a.RequiredAnti {
		t := &a.RequiredAnti[k]
		for _, p := range placed {
			if sameDomain(p.Node, t.TopologyKey) && t.Matches(p.Req.Namespace, p.Req.Labels) {
				return placement.FilterPodAntiAffinity
			}
		}
	}
	for _, p := range placed {
		if p.Req.Affinity == nil {
			continue
		}
		for k := range p.Req.Affinity.RequiredAnti {
			t := &p.Req.Affinity.RequiredAnti[k]
			if sameDomain(p.Node, t.TopologyKey) && t.Matches(req.Namespace, req.Labels) {
				return placement.FilterExistingAntiAffinity
			}
		}
	}
	return ""
}
