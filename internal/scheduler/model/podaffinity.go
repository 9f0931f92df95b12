package model

import (
	"fmt"
	"slices"
)

// Pod affinity, anti-affinity and topology spread, in the terms the core
// evaluates them: kube-scheduler's InterPodAffinity and PodTopologySpread
// with what the API server and the driver resolve already resolved (a
// term's namespaceSelector into Namespaces, matchLabelKeys and
// mismatchLabelKeys into its Selector, nodeAffinityPolicy and
// nodeTaintsPolicy into a constraint's Nodes).

// Operators of a LabelRequirement.
const (
	OpIn           = "In"
	OpNotIn        = "NotIn"
	OpExists       = "Exists"
	OpDoesNotExist = "DoesNotExist"
)

// LabelSelector selects pods by their labels: all of MatchLabels and all
// of MatchExpressions must hold. A nil selector selects nothing, an empty
// one everything (metav1.LabelSelector's rules).
type LabelSelector struct {
	MatchLabels      map[string]string  `json:"matchLabels,omitempty"`
	MatchExpressions []LabelRequirement `json:"matchExpressions,omitempty"`
}

// LabelRequirement is one expression of a selector: In and NotIn compare
// the label's value with Values (NotIn also holds when the label is
// absent), Exists and DoesNotExist ask only for the key.
type LabelRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Matches reports whether labels satisfy s.
func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s == nil {
		return false
	}
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for i := range s.MatchExpressions {
		r := &s.MatchExpressions[i]
		v, ok := labels[r.Key]
		switch r.Operator {
		case OpIn:
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case OpNotIn:
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpDoesNotExist:
			if ok {
				return false
			}
		default:
			return false // an unknown operator selects nothing
		}
	}
	return true
}

// PodAffinityTerm selects pods (Selector, among the pods of Namespaces, or
// of every namespace with AllNamespaces) and a topology: nodes with the
// same value of the label TopologyKey are one domain. The driver resolves
// the namespaces (Kubernetes' default, the pod's own namespace, included):
// empty Namespaces without AllNamespaces selects no pod. Weight (1-100)
// is a preferred term's; required terms leave it 0.
type PodAffinityTerm struct {
	Selector      *LabelSelector `json:"selector,omitempty"`
	Namespaces    []string       `json:"namespaces,omitempty"`
	AllNamespaces bool           `json:"allNamespaces,omitempty"`
	TopologyKey   string         `json:"topologyKey"`
	Weight        int32          `json:"weight,omitempty"`
}

// Matches reports whether a pod of namespace ns with labels is one the
// term selects.
func (t *PodAffinityTerm) Matches(ns string, labels map[string]string) bool {
	return (t.AllNamespaces || slices.Contains(t.Namespaces, ns)) && t.Selector.Matches(labels)
}

// PodAffinity is a pod's inter-pod affinity and anti-affinity.
//
// Required: the pod goes only to a node in whose domain, for every term,
// some pod matches all the Required terms; when no pod of the cluster does
// and the pod matches them all itself, any node with every term's
// topology key will do (the first pod of a group that wants to be
// together). RequiredAnti: the pod never goes to a node in whose domain a
// pod matches a term; and symmetrically, no pod goes to a node in whose
// domain a running pod's RequiredAnti term matches it. Preferred and
// PreferredAnti rank nodes by the weights of the matching pods in their
// domains, as do running pods' preferred terms that match the pod (and
// their Required terms, with weight 1).
type PodAffinity struct {
	Required      []PodAffinityTerm `json:"required,omitempty"`
	RequiredAnti  []PodAffinityTerm `json:"requiredAnti,omitempty"`
	Preferred     []PodAffinityTerm `json:"preferred,omitempty"`
	PreferredAnti []PodAffinityTerm `json:"preferredAnti,omitempty"`
}

// SpreadConstraint spreads the pods that Selector matches in the pod's own
// namespace over the domains of TopologyKey. Only nodes whose labels
// include Nodes (nil: every node) and that carry the topology key of every
// constraint of the pod of the same kind count: their pods, and their
// domains. Placing the pod on a node must leave the node's domain at most
// MaxSkew matching pods above the least populated counted domain (0 when
// fewer than MinDomains domains are counted), the pod itself included
// when it matches. ScheduleAnyway constraints only rank nodes: the fewer
// matching pods in the node's domain, the better.
type SpreadConstraint struct {
	MaxSkew        int32             `json:"maxSkew"`
	TopologyKey    string            `json:"topologyKey"`
	ScheduleAnyway bool              `json:"scheduleAnyway,omitempty"`
	Selector       *LabelSelector    `json:"selector,omitempty"`
	MinDomains     int32             `json:"minDomains,omitempty"`
	Nodes          map[string]string `json:"nodes,omitempty"`
}

// Constrained reports whether the request carries pod affinity,
// anti-affinity or spread constraints of its own.
func (r *Request) Constrained() bool {
	return r.Affinity != nil || len(r.Spread) > 0
}

// Bounds CheckConstraints keeps a request's constraints within.
const (
	MaxAffinityTerms     = 32 // per list of PodAffinity
	MaxSpreadConstraints = 16
	MaxSelectorTerms     = 32 // matchLabels plus matchExpressions
	MaxSelectorValues    = 64 // values of one expression
)

// CheckConstraints reports the first field of r's pod affinity and spread
// constraints that is out of bounds or means nothing (an unknown operator,
// a weight outside 1..100 on a preferred term or set on a required one, no
// topology key, maxSkew below 1), for input read from files.
func (r *Request) CheckConstraints() error {
	if a := r.Affinity; a != nil {
		for _, l := range []struct {
			name      string
			terms     []PodAffinityTerm
			preferred bool
		}{{"podAffinity.required", a.Required, false}, {"podAffinity.requiredAnti", a.RequiredAnti, false},
			{"podAffinity.preferred", a.Preferred, true}, {"podAffinity.preferredAnti", a.PreferredAnti, true}} {
			if len(l.terms) > MaxAffinityTerms {
				return fmt.Errorf("%s: %d terms, at most %d", l.name, len(l.terms), MaxAffinityTerms)
			}
			for i := range l.terms {
				t := &l.terms[i]
				field := fmt.Sprintf("%s[%d]", l.name, i)
				switch {
				case t.TopologyKey == "":
					return fmt.Errorf("%s.topologyKey: must be set", field)
				case l.preferred && (t.Weight < 1 || t.Weight > 100):
					return fmt.Errorf("%s.weight: must be 1 to 100, got %d", field, t.Weight)
				case !l.preferred && t.Weight != 0:
					return fmt.Errorf("%s.weight: only preferred terms have one, got %d", field, t.Weight)
				}
				if err := t.Selector.check(field + ".selector"); err != nil {
					return err
				}
			}
		}
	}
	if len(r.Spread) > MaxSpreadConstraints {
		return fmt.Errorf("spread: %d constraints, at most %d", len(r.Spread), MaxSpreadConstraints)
	}
	for i := range r.Spread {
		c := &r.Spread[i]
		field := fmt.Sprintf("spread[%d]", i)
		switch {
		case c.TopologyKey == "":
			return fmt.Errorf("%s.topologyKey: must be set", field)
		case c.MaxSkew < 1:
			return fmt.Errorf("%s.maxSkew: must be at least 1, got %d", field, c.MaxSkew)
		case c.MinDomains < 0 || c.MinDomains > 0 && c.ScheduleAnyway:
			return fmt.Errorf("%s.minDomains: must be at least 0, and 0 with scheduleAnyway, got %d", field, c.MinDomains)
		}
		if err := c.Selector.check(field + ".selector"); err != nil {
			return err
		}
	}
	return nil
}

func (s *LabelSelector) check(field string) error {
	if s == nil {
		return nil
	}
	if n := len(s.MatchLabels) + len(s.MatchExpressions); n > MaxSelectorTerms {
		return fmt.Errorf("%s: %d requirements, at most %d", field, n, MaxSelectorTerms)
	}
	for i, r := range s.MatchExpressions {
		f := fmt.Sprintf("%s.matchExpressions[%d]", field, i)
		switch {
		case len(r.Values) > MaxSelectorValues:
			return fmt.Errorf("%s.values: %d values, at most %d", f, len(r.Values), MaxSelectorValues)
		case r.Operator == OpIn || r.Operator == OpNotIn:
			if len(r.Values) == 0 {
				return fmt.Errorf("%s.values: %s needs at least one value", f, r.Operator)
			}
		case r.Operator == OpExists || r.Operator == OpDoesNotExist:
			if len(r.Values) > 0 {
				return fmt.Errorf("%s.values: %s takes no values", f, r.Operator)
			}
		default:
			return fmt.Errorf("%s.operator: want In, NotIn, Exists or DoesNotExist, got %q", f, r.Operator)
		}
	}
	return nil
}
