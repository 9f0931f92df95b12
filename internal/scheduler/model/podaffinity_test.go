package model

import (
	"strings"
	"testing"
)

func TestLabelSelectorMatches(t *testing.T) {
	labels := map[string]string{"app": "web", "tier": "front"}
	req := func(key, op string, values ...string) LabelRequirement {
		return LabelRequirement{Key: key, Operator: op, Values: values}
	}
	tests := []struct {
		name string
		sel  *LabelSelector
		want bool
	}{
		{"nil selects nothing", nil, false},
		{"empty selects everything", &LabelSelector{}, true},
		{"matchLabels", &LabelSelector{MatchLabels: map[string]string{"app": "web"}}, true},
		{"matchLabels of another value", &LabelSelector{MatchLabels: map[string]string{"app": "db"}}, false},
		{"matchLabels of an absent key", &LabelSelector{MatchLabels: map[string]string{"zone": ""}}, false},
		{"In", &LabelSelector{MatchExpressions: []LabelRequirement{req("app", OpIn, "db", "web")}}, true},
		{"In of an absent key", &LabelSelector{MatchExpressions: []LabelRequirement{req("zone", OpIn, "a")}}, false},
		{"NotIn", &LabelSelector{MatchExpressions: []LabelRequirement{req("app", OpNotIn, "web")}}, false},
		{"NotIn holds for an absent key", &LabelSelector{MatchExpressions: []LabelRequirement{req("zone", OpNotIn, "a")}}, true},
		{"Exists", &LabelSelector{MatchExpressions: []LabelRequirement{req("tier", OpExists)}}, true},
		{"DoesNotExist", &LabelSelector{MatchExpressions: []LabelRequirement{req("tier", OpDoesNotExist)}}, false},
		{"all must hold", &LabelSelector{MatchLabels: map[string]string{"app": "web"}, MatchExpressions: []LabelRequirement{req("tier", OpDoesNotExist)}}, false},
		{"an unknown operator selects nothing", &LabelSelector{MatchExpressions: []LabelRequirement{req("app", "Near", "web")}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.Matches(labels); got != tc.want {
				t.Fatalf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
	term := PodAffinityTerm{Selector: &LabelSelector{}, Namespaces: []string{"a"}, TopologyKey: "zone"}
	if !term.Matches("a", nil) || term.Matches("b", nil) {
		t.Fatal("a term matches the pods of its namespaces only")
	}
	if term.Namespaces, term.AllNamespaces = nil, true; !term.Matches("b", nil) {
		t.Fatal("a term of all namespaces matches any")
	}
	if term.AllNamespaces = false; term.Matches("a", nil) {
		t.Fatal("a term of no namespace matches none")
	}
}

func TestCheckConstraints(t *testing.T) {
	sel := &LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"fine", Request{Affinity: &PodAffinity{Required: []PodAffinityTerm{{Selector: sel, TopologyKey: "zone"}}, Preferred: []PodAffinityTerm{{Selector: sel, TopologyKey: "zone", Weight: 100}}},
			Spread: []SpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", Selector: sel, MinDomains: 2}}}, ""},
		{"no topology key", Request{Affinity: &PodAffinity{RequiredAnti: []PodAffinityTerm{{Selector: sel}}}}, "podAffinity.requiredAnti[0].topologyKey"},
		{"a preferred term without weight", Request{Affinity: &PodAffinity{PreferredAnti: []PodAffinityTerm{{Selector: sel, TopologyKey: "zone"}}}}, "podAffinity.preferredAnti[0].weight"},
		{"an unknown operator", Request{Spread: []SpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", Selector: &LabelSelector{MatchExpressions: []LabelRequirement{{Key: "a", Operator: "near"}}}}}},
			"spread[0].selector.matchExpressions[0].operator"},
		{"In without values", Request{Spread: []SpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", Selector: &LabelSelector{MatchExpressions: []LabelRequirement{{Key: "a", Operator: OpIn}}}}}},
			"spread[0].selector.matchExpressions[0].values"},
		{"maxSkew 0", Request{Spread: []SpreadConstraint{{TopologyKey: "zone"}}}, "spread[0].maxSkew"},
		{"minDomains with ScheduleAnyway", Request{Spread: []SpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", ScheduleAnyway: true, MinDomains: 2}}}, "spread[0].minDomains"},
		{"too many terms", Request{Affinity: &PodAffinity{Required: make([]PodAffinityTerm, MaxAffinityTerms+1)}}, "podAffinity.required: 33 terms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.CheckConstraints()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestApplyCarriesPodConstraints: a bound pod runs with its namespace,
// labels and constraints, and an evicted one waits again with them, so
// that every later cycle of a driver sees what the core saw.
func TestApplyCarriesPodConstraints(t *testing.T) {
	req := Request{GPUs: 1, Namespace: "ml", Labels: map[string]string{"app": "x"},
		Affinity: &PodAffinity{RequiredAnti: []PodAffinityTerm{{Selector: &LabelSelector{}, Namespaces: []string{"ml"}, TopologyKey: "zone"}}},
		Spread:   []SpreadConstraint{{MaxSkew: 1, TopologyKey: "zone"}}}
	snap := Snapshot{Nodes: []Node{{Name: "n", GPUs: []GPU{{Index: 0}}}}, Pending: []PodGroup{{Name: "g", Pods: []Pod{{Name: "p", Request: req}}}}}
	d := Decisions{Binds: []Bind{{Pod: "p", Group: "g", Node: "n", GPUs: []GPUShare{{Index: 0, Milli: MilliPerGPU}}}}}
	if err := Apply(&snap, &d, 1); err != nil {
		t.Fatal(err)
	}
	a := snap.RunningByNode[0][0]
	if a.Request.Namespace != "ml" || a.Request.Labels["app"] != "x" || a.Request.Affinity != req.Affinity || len(a.Request.Spread) != 1 {
		t.Fatalf("running %+v lost the pod's constraints", a.Request)
	}
	d = Decisions{Evictions: []Eviction{{Pod: "p", Group: "g", Node: "n"}}}
	if err := Apply(&snap, &d, 2); err != nil {
		t.Fatal(err)
	}
	if r := snap.Pending[len(snap.Pending)-1].Pods[0].Request; r.Affinity != req.Affinity || r.Labels["app"] != "x" {
		t.Fatalf("evicted pod waits with %+v", r)
	}
}
