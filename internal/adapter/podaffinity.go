package adapter

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corehelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Bounds on what a pod's inter-pod affinity and topology spread may ask:
// far above what a workload writes, low enough that one pod cannot make a
// cycle slow. A pod beyond them waits with an event naming the field.
const (
	maxPodAffinityTerms  = 32 // per list (required, preferred; affinity, anti-affinity)
	maxSpreadConstraints = 16
	maxSelectorTerms     = 32 // matchLabels plus matchExpressions of one selector
	maxSelectorValues    = 64 // values of one expression
	maxTermNamespaces    = 64 // a term's own namespaces list
	maxLabelKeys         = 16 // matchLabelKeys, mismatchLabelKeys
)

// spreadInclusion is how one topology spread constraint picks the nodes
// whose pods it counts (nodeAffinityPolicy, nodeTaintsPolicy): the core
// learns them as a class label (builder.inclusionClass).
type spreadInclusion struct {
	honorAffinity, honorTaints bool
}

// podConstraints sets req's namespace, labels, inter-pod affinity and
// topology spread from pod p, as kube-scheduler reads them: a term's
// namespaceSelector becomes the namespaces (of nsLabels) it selects, and
// matchLabelKeys and mismatchLabelKeys become requirements of the
// selector, as the API server merges them. It returns the inclusion
// policy of each spread constraint, and an error naming the field of
// input beyond the bounds above.
func podConstraints(p *corev1.Pod, nsLabels map[string]map[string]string, req *model.Request) ([]spreadInclusion, *BadInputError) {
	req.Namespace, req.Labels = p.Namespace, p.Labels
	if a := p.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		out := &model.PodAffinity{}
		var err *BadInputError
		if pa := a.PodAffinity; pa != nil {
			if out.Required, err = requiredTerms(p, nsLabels, "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution", pa.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
				return nil, err
			}
			if out.Preferred, err = preferredTerms(p, nsLabels, "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution", pa.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
				return nil, err
			}
		}
		if pa := a.PodAntiAffinity; pa != nil {
			if out.RequiredAnti, err = requiredTerms(p, nsLabels, "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution", pa.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
				return nil, err
			}
			if out.PreferredAnti, err = preferredTerms(p, nsLabels, "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution", pa.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
				return nil, err
			}
		}
		if len(out.Required)+len(out.Preferred)+len(out.RequiredAnti)+len(out.PreferredAnti) > 0 {
			req.Affinity = out
		}
	}
	cs := p.Spec.TopologySpreadConstraints
	if len(cs) == 0 {
		return nil, nil
	}
	if len(cs) > maxSpreadConstraints {
		return nil, affinityBad("spec.topologySpreadConstraints: %d constraints, at most %d", len(cs), maxSpreadConstraints)
	}
	req.Spread = make([]model.SpreadConstraint, len(cs))
	incl := make([]spreadInclusion, len(cs))
	for i := range cs {
		c := &cs[i]
		field := fmt.Sprintf("spec.topologySpreadConstraints[%d]", i)
		if c.MaxSkew < 1 {
			return nil, affinityBad("%s.maxSkew: must be at least 1, got %d", field, c.MaxSkew)
		}
		if c.TopologyKey == "" {
			return nil, affinityBad("%s.topologyKey: must be set", field)
		}
		sel, err := selector(field+".labelSelector", c.LabelSelector)
		if err != nil {
			return nil, err
		}
		if sel, err = mergeLabelKeys(field+".matchLabelKeys", sel, p.Labels, c.MatchLabelKeys, model.OpIn); err != nil {
			return nil, err
		}
		out := model.SpreadConstraint{MaxSkew: c.MaxSkew, TopologyKey: c.TopologyKey, Selector: sel}
		switch c.WhenUnsatisfiable {
		case corev1.DoNotSchedule:
			if c.MinDomains != nil {
				if *c.MinDomains < 1 {
					return nil, affinityBad("%s.minDomains: must be at least 1, got %d", field, *c.MinDomains)
				}
				out.MinDomains = *c.MinDomains
			}
		case corev1.ScheduleAnyway:
			out.ScheduleAnyway = true
		default:
			return nil, affinityBad("%s.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, got %q", field, c.WhenUnsatisfiable)
		}
		incl[i] = spreadInclusion{honorAffinity: true}
		if c.NodeAffinityPolicy != nil {
			switch *c.NodeAffinityPolicy {
			case corev1.NodeInclusionPolicyIgnore:
				incl[i].honorAffinity = false
			case corev1.NodeInclusionPolicyHonor:
			default:
				return nil, affinityBad("%s.nodeAffinityPolicy: must be Honor or Ignore, got %q", field, *c.NodeAffinityPolicy)
			}
		}
		if c.NodeTaintsPolicy != nil {
			switch *c.NodeTaintsPolicy {
			case corev1.NodeInclusionPolicyHonor:
				incl[i].honorTaints = true
			case corev1.NodeInclusionPolicyIgnore:
			default:
				return nil, affinityBad("%s.nodeTaintsPolicy: must be Honor or Ignore, got %q", field, *c.NodeTaintsPolicy)
			}
		}
		req.Spread[i] = out
	}
	return incl, nil
}

func affinityBad(format string, args ...any) *BadInputError {
	return badInput("PodConstraintTooLarge", format, args...)
}

func requiredTerms(p *corev1.Pod, nsLabels map[string]map[string]string, field string, terms []corev1.PodAffinityTerm) ([]model.PodAffinityTerm, *BadInputError) {
	if len(terms) > maxPodAffinityTerms {
		return nil, affinityBad("%s: %d terms, at most %d", field, len(terms), maxPodAffinityTerms)
	}
	var out []model.PodAffinityTerm
	for i := range terms {
		t, err := affinityTerm(p, nsLabels, fmt.Sprintf("%s[%d]", field, i), &terms[i])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func preferredTerms(p *corev1.Pod, nsLabels map[string]map[string]string, field string, terms []corev1.WeightedPodAffinityTerm) ([]model.PodAffinityTerm, *BadInputError) {
	if len(terms) > maxPodAffinityTerms {
		return nil, affinityBad("%s: %d terms, at most %d", field, len(terms), maxPodAffinityTerms)
	}
	var out []model.PodAffinityTerm
	for i := range terms {
		f := fmt.Sprintf("%s[%d]", field, i)
		if w := terms[i].Weight; w < 1 || w > 100 {
			return nil, affinityBad("%s.weight: must be 1 to 100, got %d", f, w)
		}
		t, err := affinityTerm(p, nsLabels, f+".podAffinityTerm", &terms[i].PodAffinityTerm)
		if err != nil {
			return nil, err
		}
		t.Weight = terms[i].Weight
		out = append(out, t)
	}
	return out, nil
}

// affinityTerm converts one term: its namespaces (the pod's own when it
// names none and has no namespaceSelector; every namespace for an empty
// namespaceSelector) and its selector with matchLabelKeys and
// mismatchLabelKeys merged.
func affinityTerm(p *corev1.Pod, nsLabels map[string]map[string]string, field string, t *corev1.PodAffinityTerm) (model.PodAffinityTerm, *BadInputError) {
	out := model.PodAffinityTerm{TopologyKey: t.TopologyKey}
	if t.TopologyKey == "" {
		return out, affinityBad("%s.topologyKey: must be set", field)
	}
	if len(t.Namespaces) > maxTermNamespaces {
		return out, affinityBad("%s.namespaces: %d namespaces, at most %d", field, len(t.Namespaces), maxTermNamespaces)
	}
	sel, err := selector(field+".labelSelector", t.LabelSelector)
	if err != nil {
		return out, err
	}
	if sel, err = mergeLabelKeys(field+".matchLabelKeys", sel, p.Labels, t.MatchLabelKeys, model.OpIn); err != nil {
		return out, err
	}
	if sel, err = mergeLabelKeys(field+".mismatchLabelKeys", sel, p.Labels, t.MismatchLabelKeys, model.OpNotIn); err != nil {
		return out, err
	}
	out.Selector = sel
	out.Namespaces = slices.Clone(t.Namespaces)
	switch ns := t.NamespaceSelector; {
	case ns == nil:
		if len(out.Namespaces) == 0 {
			out.Namespaces = []string{p.Namespace}
		}
	case len(ns.MatchLabels) == 0 && len(ns.MatchExpressions) == 0:
		out.AllNamespaces = true
	default:
		if n := len(ns.MatchLabels) + len(ns.MatchExpressions); n > maxSelectorTerms {
			return out, affinityBad("%s.namespaceSelector: %d requirements, at most %d", field, n, maxSelectorTerms)
		}
		s, perr := metav1.LabelSelectorAsSelector(ns)
		if perr != nil {
			return out, affinityBad("%s.namespaceSelector: %v", field, perr)
		}
		for _, name := range slices.Sorted(maps.Keys(nsLabels)) {
			if s.Matches(labels.Set(nsLabels[name])) && !slices.Contains(out.Namespaces, name) {
				out.Namespaces = append(out.Namespaces, name)
			}
		}
	}
	return out, nil
}

// selector converts a label selector; nil stays nil (it selects nothing).
func selector(field string, s *metav1.LabelSelector) (*model.LabelSelector, *BadInputError) {
	if s == nil {
		return nil, nil
	}
	if n := len(s.MatchLabels) + len(s.MatchExpressions); n > maxSelectorTerms {
		return nil, affinityBad("%s: %d requirements, at most %d", field, n, maxSelectorTerms)
	}
	// The API server validates selectors; one read from the cluster is
	// checked again all the same.
	if _, err := metav1.LabelSelectorAsSelector(s); err != nil {
		return nil, affinityBad("%s: %v", field, err)
	}
	out := &model.LabelSelector{MatchLabels: s.MatchLabels}
	for i, r := range s.MatchExpressions {
		if len(r.Values) > maxSelectorValues {
			return nil, affinityBad("%s.matchExpressions[%d].values: %d values, at most %d", field, i, len(r.Values), maxSelectorValues)
		}
		op := string(r.Operator)
		switch r.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
		default:
			return nil, affinityBad("%s.matchExpressions[%d].operator: unknown operator %q", field, i, op)
		}
		out.MatchExpressions = append(out.MatchExpressions, model.LabelRequirement{Key: r.Key, Operator: op, Values: r.Values})
	}
	return out, nil
}

// mergeLabelKeys adds, for each key of keys the pod has a label of, the
// requirement key op [value] to sel, as the API server does when the pod
// is created; a key the selector already requires that way is left as it
// is (the API server merged it already). A nil selector selects nothing,
// and stays so.
func mergeLabelKeys(field string, sel *model.LabelSelector, podLabels map[string]string, keys []string, op string) (*model.LabelSelector, *BadInputError) {
	if len(keys) == 0 || sel == nil {
		return sel, nil
	}
	if len(keys) > maxLabelKeys {
		return nil, affinityBad("%s: %d keys, at most %d", field, len(keys), maxLabelKeys)
	}
	out := &model.LabelSelector{MatchLabels: sel.MatchLabels, MatchExpressions: slices.Clone(sel.MatchExpressions)}
	for _, k := range keys {
		v, ok := podLabels[k]
		if !ok {
			continue
		}
		if slices.ContainsFunc(out.MatchExpressions, func(r model.LabelRequirement) bool {
			return r.Key == k && r.Operator == op && slices.Equal(r.Values, []string{v})
		}) {
			continue
		}
		out.MatchExpressions = append(out.MatchExpressions, model.LabelRequirement{Key: k, Operator: op, Values: []string{v}})
	}
	return out, nil
}

// usesNamespaceSelector reports whether a pod's affinity terms select
// namespaces by their labels: its conversion then changes when they do.
func usesNamespaceSelector(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a == nil {
		return false
	}
	var req []corev1.PodAffinityTerm
	var pref []corev1.WeightedPodAffinityTerm
	if a.PodAffinity != nil {
		req = append(req, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		pref = append(pref, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	if a.PodAntiAffinity != nil {
		req = append(req, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		pref = append(pref, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	return slices.ContainsFunc(req, func(t corev1.PodAffinityTerm) bool { return t.NamespaceSelector != nil }) ||
		slices.ContainsFunc(pref, func(t corev1.WeightedPodAffinityTerm) bool { return t.PodAffinityTerm.NamespaceSelector != nil })
}

// inclusionClass returns the class label of the nodes a spread constraint
// of pod pi counts under its inclusion policy, nil when it counts every
// node: the nodes that match the pod's required node affinity (Honor) and
// whose NoSchedule and NoExecute taints it tolerates (Honor), as
// kube-scheduler's PodTopologySpread picks them.
func (b *builder) inclusionClass(pi *podInfo, in spreadInclusion, used map[string]bool) map[string]string {
	if !in.honorAffinity && !in.honorTaints {
		return nil
	}
	key := fmt.Sprintf("spread\x00%t\x00%t\x00%s", in.honorAffinity, in.honorTaints, classKey(pi.pod))
	cl := b.classes[key]
	if cl == nil {
		p := pi.pod
		aff := nodeaffinity.GetRequiredNodeAffinity(p)
		cl = &podClass{pod: p, match: make([]bool, len(b.nodes)), all: true}
		for i, n := range b.nodes {
			ok := true
			if in.honorAffinity {
				m, err := aff.Match(n.node)
				ok = err == nil && m
			}
			if ok && in.honorTaints {
				_, bad := corehelpers.FindMatchingUntoleratedTaint(b.log, n.node.Spec.Taints, p.Spec.Tolerations, untoleratedEffects, false)
				ok = !bad
			}
			cl.match[i] = ok
			cl.all = cl.all && ok
		}
		if !cl.all {
			cl.id = b.classID(key)
		}
		b.classes[key] = cl
	}
	if cl.all {
		return nil
	}
	used[key] = true
	return map[string]string{classLabelPrefix + strconv.Itoa(cl.id): "true"}
}
