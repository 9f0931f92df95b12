package adapter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func TestPodConstraints(t *testing.T) {
	nsLabels := map[string]map[string]string{"a": {"team": "x"}, "b": {"team": "x"}, "c": {"team": "y"}}
	term := func(mod func(*corev1.PodAffinityTerm)) corev1.PodAffinityTerm {
		t := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: "zone"}
		if mod != nil {
			mod(&t)
		}
		return t
	}
	pod := func(aff *corev1.Affinity, spread ...corev1.TopologySpreadConstraint) *corev1.Pod {
		p := newPod("a", "p").GPUs(1).Obj()
		p.Labels = map[string]string{"app": "web", "rev": "7"}
		p.Spec.Affinity, p.Spec.TopologySpreadConstraints = aff, spread
		return p
	}
	anti := func(ts ...corev1.PodAffinityTerm) *corev1.Affinity {
		return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ts}}
	}
	honor, ignore := corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore
	three := int32(3)
	tests := []struct {
		name    string
		pod     *corev1.Pod
		check   func(t *testing.T, r *model.Request, incl []spreadInclusion)
		wantBad string
	}{
		{name: "a term without namespaces selects the pod's own", pod: pod(anti(term(nil))), check: func(t *testing.T, r *model.Request, _ []spreadInclusion) {
			if got := r.Affinity.RequiredAnti[0]; !slices.Equal(got.Namespaces, []string{"a"}) || got.AllNamespaces || got.TopologyKey != "zone" {
				t.Fatalf("term %+v", got)
			}
			if r.Namespace != "a" || r.Labels["app"] != "web" {
				t.Fatalf("namespace %q labels %v", r.Namespace, r.Labels)
			}
		}},
		{name: "a namespaceSelector becomes the namespaces it selects", pod: pod(anti(term(func(t *corev1.PodAffinityTerm) {
			t.Namespaces = []string{"c"}
			t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}
		}))), check: func(t *testing.T, r *model.Request, _ []spreadInclusion) {
			if got := r.Affinity.RequiredAnti[0].Namespaces; !slices.Equal(got, []string{"c", "a", "b"}) {
				t.Fatalf("namespaces %v, want c, a, b", got)
			}
		}},
		{name: "an empty namespaceSelector selects every namespace", pod: pod(anti(term(func(t *corev1.PodAffinityTerm) {
			t.NamespaceSelector = &metav1.LabelSelector{}
		}))), check: func(t *testing.T, r *model.Request, _ []spreadInclusion) {
			if !r.Affinity.RequiredAnti[0].AllNamespaces {
				t.Fatal("not all namespaces")
			}
		}},
		{name: "matchLabelKeys and mismatchLabelKeys join the selector", pod: pod(anti(term(func(t *corev1.PodAffinityTerm) {
			t.MatchLabelKeys, t.MismatchLabelKeys = []string{"rev", "absent"}, []string{"app"}
		}))), check: func(t *testing.T, r *model.Request, _ []spreadInclusion) {
			s := r.Affinity.RequiredAnti[0].Selector
			want := []model.LabelRequirement{{Key: "rev", Operator: model.OpIn, Values: []string{"7"}}, {Key: "app", Operator: model.OpNotIn, Values: []string{"web"}}}
			if !slices.EqualFunc(s.MatchExpressions, want, func(a, b model.LabelRequirement) bool {
				return a.Key == b.Key && a.Operator == b.Operator && slices.Equal(a.Values, b.Values)
			}) {
				t.Fatalf("expressions %+v, want %+v", s.MatchExpressions, want)
			}
		}},
		{name: "preferred terms keep their weights", pod: pod(&corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 40, PodAffinityTerm: term(nil)}}}}),
			check: func(t *testing.T, r *model.Request, _ []spreadInclusion) {
				if p := r.Affinity.Preferred; len(p) != 1 || p[0].Weight != 40 {
					t.Fatalf("preferred %+v", p)
				}
			}},
		{name: "spread constraints with their policies", pod: pod(nil,
			corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule, MinDomains: &three,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, MatchLabelKeys: []string{"rev"}, NodeTaintsPolicy: &honor},
			corev1.TopologySpreadConstraint{MaxSkew: 2, TopologyKey: "host", WhenUnsatisfiable: corev1.ScheduleAnyway, NodeAffinityPolicy: &ignore}),
			check: func(t *testing.T, r *model.Request, incl []spreadInclusion) {
				c := r.Spread
				if len(c) != 2 || c[0].MinDomains != 3 || c[0].ScheduleAnyway || !c[1].ScheduleAnyway || c[1].Selector != nil ||
					len(c[0].Selector.MatchExpressions) != 1 || c[0].Selector.MatchExpressions[0].Values[0] != "7" {
					t.Fatalf("spread %+v", c)
				}
				if !slices.Equal(incl, []spreadInclusion{{honorAffinity: true, honorTaints: true}, {}}) {
					t.Fatalf("inclusion %+v", incl)
				}
			}},
		{name: "too many terms", pod: pod(anti(slices.Repeat([]corev1.PodAffinityTerm{term(nil)}, maxPodAffinityTerms+1)...)),
			wantBad: "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution: 33 terms"},
		{name: "too many values", pod: pod(anti(term(func(t *corev1.PodAffinityTerm) {
			t.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: make([]string, 65)}}}
		}))), wantBad: "requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"},
		{name: "a bad operator", pod: pod(anti(term(func(t *corev1.PodAffinityTerm) {
			t.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
		}))), wantBad: "labelSelector"},
		{name: "maxSkew 0", pod: pod(nil, corev1.TopologySpreadConstraint{MaxSkew: 0, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}),
			wantBad: "spec.topologySpreadConstraints[0].maxSkew"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req model.Request
			incl, bad := podConstraints(tc.pod, nsLabels, &req)
			if tc.wantBad != "" {
				if bad == nil || !strings.Contains(bad.Msg, tc.wantBad) {
					t.Fatalf("error %v, want one naming %q", bad, tc.wantBad)
				}
				return
			}
			if bad != nil {
				t.Fatal(bad)
			}
			tc.check(t, &req, incl)
		})
	}
}

// TestSnapshotCarriesPodConstraints: running pods carry their namespace,
// labels and affinity into their allocations, nodes carry their topology
// labels apart from their classes, a spread constraint that honours taints
// counts only the nodes the pod tolerates, and a namespace relabelled
// changes what a namespaceSelector selects.
func TestSnapshotCarriesPodConstraints(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	for i := range 3 {
		n := build.Node(fmt.Sprintf("n%d", i)).Resources(rl("nvidia.com/gpu", "8", "cpu", "32", "memory", "64Gi")).Obj()
		n.Labels = map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("z%d", i)}
		if i == 2 {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}
		}
		c.upsertNode(n)
	}
	c.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{"team": "x"}}})
	guard := newPod("ml", "guard").GPUs(1).Obj()
	guard.Labels = map[string]string{"app": "guard"}
	guard.Spec.NodeName = "n0"
	guard.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: "topology.kubernetes.io/zone",
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "y"}}}}}}
	c.upsertPod(guard)
	honor := corev1.NodeInclusionPolicyHonor
	web := newPod("ml", "web").GPUs(1).Obj()
	web.Labels = map[string]string{"app": "web"}
	web.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, NodeTaintsPolicy: &honor}}
	c.upsertPod(web)

	b := newBuilder(v1alpha1.SchedulerName, -1, logr.Discard())
	in := c.snapshot(b, newRefusals(), time.Unix(200, 0))
	var a *model.Allocation
	for x := range in.snap.AllRunning() {
		if x.Pod == "ml/guard" {
			a = x
		}
	}
	if a == nil || a.Request.Namespace != "ml" || a.Request.Labels["app"] != "guard" || a.Request.Affinity == nil {
		t.Fatalf("guard's allocation %+v lacks its namespace, labels or affinity", a)
	}
	if ns := a.Request.Affinity.RequiredAnti[0].Namespaces; len(ns) != 0 {
		t.Fatalf("no namespace is labelled team=y, yet the term selects %v", ns)
	}
	for i, n := range in.snap.Nodes {
		if n.Domains["topology.kubernetes.io/zone"] != fmt.Sprintf("z%d", i) {
			t.Fatalf("node %s domains %v", n.Name, n.Domains)
		}
	}
	var req *model.Request
	for _, g := range in.snap.Pending {
		if g.Name == "pod/ml/web" {
			req = &g.Pods[0].Request
		}
	}
	if req == nil || len(req.Spread) != 1 {
		t.Fatalf("web pending with %+v", req)
	}
	counted := 0
	for _, n := range in.snap.Nodes {
		ok := len(req.Spread[0].Nodes) > 0
		for k, v := range req.Spread[0].Nodes {
			ok = ok && n.Labels[k] == v
		}
		if ok {
			counted++
			if n.Name == "n2" {
				t.Fatal("the tainted node counts under nodeTaintsPolicy Honor")
			}
		}
	}
	if counted != 2 {
		t.Fatalf("%d nodes counted, want n0 and n1", counted)
	}

	c.upsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{"team": "y"}}})
	in = c.snapshot(b, newRefusals(), time.Unix(300, 0))
	for x := range in.snap.AllRunning() {
		if x.Pod == "ml/guard" {
			if ns := x.Request.Affinity.RequiredAnti[0].Namespaces; !slices.Equal(ns, []string{"ml"}) {
				t.Fatalf("after relabelling, the term selects %v, want [ml]", ns)
			}
			return
		}
	}
	t.Fatal("guard is gone")
}

// TestCacheKeepsPodConstraints: the informer's slimmed pods keep what the
// constraints read: a waiting pod its spread constraints and affinity, a
// placed pod its inter-pod affinity (its anti-affinity still repels).
func TestCacheKeepsPodConstraints(t *testing.T) {
	p := newPod("ns", "p").GPUs(1).Obj()
	p.Spec.Affinity = &corev1.Affinity{
		NodeAffinity:    &corev1.NodeAffinity{},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "zone"}}},
	}
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}}
	slimmed := func(p *corev1.Pod) *corev1.Pod {
		o, err := forCache(p)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*corev1.Pod)
	}
	if w := slimmed(p.DeepCopy()); len(w.Spec.TopologySpreadConstraints) != 1 || w.Spec.Affinity.PodAntiAffinity == nil {
		t.Fatalf("waiting pod lost its constraints: %+v", w.Spec)
	}
	p.Spec.NodeName = "n"
	b := slimmed(p.DeepCopy())
	if b.Spec.Affinity == nil || b.Spec.Affinity.PodAntiAffinity == nil || b.Spec.Affinity.NodeAffinity != nil {
		t.Fatalf("placed pod keeps %+v, want its pod anti-affinity only", b.Spec.Affinity)
	}
}
