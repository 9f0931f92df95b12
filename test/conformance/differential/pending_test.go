package differential

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// pending draws a pod waiting for gpuplane-scheduler. Its requests sit at
// the edge of what one node has left as often as not (exactly that, one
// unit more), so that capacity decides; its selector, affinity and
// tolerations name the labels and taints the nodes carry.
func (g *gen) pending(c *cluster, left []*free, name string) *corev1.Pod {
	target := left[g.pick(len(left))]
	want := corev1.ResourceList{}
	edge := func(res corev1.ResourceName, unit, small int64) {
		q, ok := target.list[res]
		var have int64
		if ok {
			have = q.Value()
			if res == corev1.ResourceCPU {
				have = q.MilliValue()
			}
		}
		if res == corev1.ResourceMemory && !g.on[SubMiBMemory] {
			have = have / mib * mib
		}
		var v int64
		switch g.pick(5) {
		case 0:
			return
		case 1:
			v = have
		case 2:
			v = have + unit
		case 3:
			v = g.r.Int64N(max(have, 0)/unit+1) * unit
		default:
			v = (1 + g.r.Int64N(small)) * unit
		}
		if v > 0 {
			want[res] = g.quantity(res, v)
		}
	}
	if g.on[CPUMemory] {
		edge(corev1.ResourceCPU, 1, 4000)
		unit := int64(mib)
		if g.on[SubMiBMemory] && g.chance(0.5) {
			unit = 1
		}
		edge(corev1.ResourceMemory, unit, 8192)
	}
	if g.on[GPUs] && g.chance(0.6) {
		// On a node time-sliced under nvidia.com/gpu itself, a pod asking
		// for more replicas than one GPU has takes them from several, as
		// the kubelet hands them out (model.GPU.Spans): any count fits
		// the nodes kube-scheduler finds with that many replicas free.
		edge(gpunode.ResourceGPU, 1, 4)
	}
	if g.on[SharedGPUs] && g.chance(0.4) {
		edge(gpunode.ResourceGPUShared, 1, 4)
		if q, ok := want[gpunode.ResourceGPUShared]; ok && q.Value() > 1 {
			// gpuplane takes a pod's replicas of
			// nvidia.com/gpu.shared from one GPU
			// (placement.FilterReplicasOneGPU), as it takes those of
			// nvidia.com/gpu: more than one replica is refused by
			// that rule, or where no one GPU has them free, on nodes
			// where the kubelet would hand out replicas of several
			// GPUs.
			want[gpunode.ResourceGPUShared] = g.quantity(gpunode.ResourceGPUShared, 1)
		}
	}
	if g.on[MIG] && g.chance(0.4) {
		edge(resourceMIG, 1, 1)
		if q, ok := want[resourceMIG]; ok && q.Value() > 1 {
			// gpuplane places one MIG instance per pod (the adapter
			// refuses more, MixedGPURequest, naming the rule).
			want[resourceMIG] = g.quantity(resourceMIG, 1)
		}
	}
	if g.on[EphemeralStorage] {
		edge(corev1.ResourceEphemeralStorage, mib, 4096)
	}
	if g.on[HugePages] && g.chance(0.4) {
		edge(resourceHugePages, 2*mib, 4)
	}
	if g.on[ExtendedResources] && g.chance(0.4) {
		edge(resourceNIC, 1, 2)
	}
	p := g.pod(name, want)
	p.Spec.SchedulerName = v1alpha1.SchedulerName
	p.Status.Phase = corev1.PodPending
	if g.on[NodeSelector] && g.chance(0.4) {
		p.Spec.NodeSelector = map[string]string{}
		for range 1 + g.pick(2) {
			k := pickOf(g, selectorKeys)
			p.Spec.NodeSelector[k] = g.labelValue(c, k)
		}
	}
	if g.on[NodeAffinity] && g.chance(0.4) {
		sel := &corev1.NodeSelector{}
		for range 1 + g.pick(2) {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, g.nodeTerm(c))
		}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
	}
	if g.on[Taints] || g.on[Unschedulable] {
		for range g.pick(4) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, g.toleration())
		}
	}
	if g.on[HostPorts] && g.chance(0.4) {
		p.Spec.Containers[0].Ports = g.hostPorts()
	}
	if g.on[InterPodAffinity] && g.chance(0.4) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		if g.chance(0.5) {
			p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.podTerm(p)}}
		} else {
			p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.podTerm(p)}}
		}
	}
	if g.on[TopologySpread] && g.chance(0.4) {
		for range 1 + g.pick(2) {
			tsc := corev1.TopologySpreadConstraint{
				MaxSkew: int32(1 + g.pick(2)), TopologyKey: pickOf(g, []string{labelHostname, labelZone}), WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelApp: p.Labels[labelApp]}},
			}
			if g.chance(0.3) {
				tsc.MinDomains = ptr.To(int32(1 + g.pick(4)))
			}
			if g.chance(0.3) {
				tsc.MatchLabelKeys = []string{labelRev}
			}
			if g.chance(0.3) {
				tsc.NodeAffinityPolicy = ptr.To(pickOf(g, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}))
			}
			if g.chance(0.3) {
				tsc.NodeTaintsPolicy = ptr.To(pickOf(g, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}))
			}
			// The API server refuses two constraints of one key and
			// whenUnsatisfiable.
			if !slices.ContainsFunc(p.Spec.TopologySpreadConstraints, func(o corev1.TopologySpreadConstraint) bool { return o.TopologyKey == tsc.TopologyKey }) {
				p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, tsc)
			}
		}
	}
	return p
}

// selectorKeys are the node labels selectors and affinity terms name; the
// last is on no node.
var selectorKeys = []string{labelZone, labelTier, labelRank, labelHostname, gpunode.LabelGPUProduct, "example.com/absent"}

// labelValue draws a value for label key: mostly one a node carries, else
// one of the pool's, which may be on no node.
func (g *gen) labelValue(c *cluster, key string) string {
	if g.chance(0.75) {
		if v, ok := pickOf(g, c.nodes).Labels[key]; ok {
			return v
		}
	}
	switch key {
	case labelZone:
		return pickOf(g, zones)
	case labelTier:
		return pickOf(g, tiers)
	case labelRank:
		return strconv.Itoa(1 + g.pick(5))
	case gpunode.LabelGPUProduct:
		return pickOf(g, products).name
	}
	return "node-" + strconv.Itoa(g.pick(6))
}

// nodeTerm draws a node selector term of one or two requirements, every
// operator, and now and then a matchFields requirement on metadata.name.
func (g *gen) nodeTerm(c *cluster) corev1.NodeSelectorTerm {
	var t corev1.NodeSelectorTerm
	for range 1 + g.pick(2) {
		k := pickOf(g, selectorKeys)
		r := corev1.NodeSelectorRequirement{Key: k}
		switch g.pick(6) {
		case 0, 1:
			r.Operator = corev1.NodeSelectorOpIn
			r.Values = []string{g.labelValue(c, k)}
			if g.chance(0.4) {
				r.Values = append(r.Values, g.labelValue(c, k))
			}
		case 2:
			r.Operator = corev1.NodeSelectorOpNotIn
			r.Values = []string{g.labelValue(c, k)}
		case 3:
			r.Operator = corev1.NodeSelectorOpExists
		case 4:
			r.Operator = corev1.NodeSelectorOpDoesNotExist
		case 5:
			r.Key = labelRank
			r.Operator = pickOf(g, []corev1.NodeSelectorOperator{corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt})
			r.Values = []string{strconv.Itoa(g.pick(7))}
		}
		t.MatchExpressions = append(t.MatchExpressions, r)
	}
	if g.chance(0.2) {
		t.MatchFields = []corev1.NodeSelectorRequirement{{Key: "metadata.name",
			Operator: pickOf(g, []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn}),
			Values:   []string{pickOf(g, c.nodes).Name}}}
	}
	return t
}

// toleration draws a toleration of the taints nodes carry: by key and
// value, by key alone, of everything, of the cordon's taint.
func (g *gen) toleration() corev1.Toleration {
	effect := corev1.TaintEffect("")
	if g.chance(0.6) {
		effect = pickOf(g, effects)
	}
	switch g.pick(8) {
	case 0:
		return corev1.Toleration{Operator: corev1.TolerationOpExists}
	case 1:
		if g.on[Unschedulable] {
			return corev1.Toleration{Key: taintUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
		}
	case 2, 3:
		return corev1.Toleration{Key: pickOf(g, taintKeys), Operator: corev1.TolerationOpExists, Effect: effect}
	case 4:
		secs := int64(300)
		return corev1.Toleration{Key: pickOf(g, taintKeys), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}
	}
	return corev1.Toleration{Key: pickOf(g, taintKeys), Operator: corev1.TolerationOpEqual, Value: pickOf(g, taintVals), Effect: effect}
}

// podTerm draws a required pod (anti-)affinity term: pods of one app, per
// node or per zone.
func (g *gen) podTerm(p *corev1.Pod) corev1.PodAffinityTerm {
	t := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelApp: pickOf(g, apps)}},
		TopologyKey:   pickOf(g, []string{labelHostname, labelZone}),
	}
	// Pods of the term's own namespace (none named), of one, or of
	// several.
	switch g.pick(3) {
	case 1:
		t.Namespaces = []string{pickOf(g, namespaces)}
	case 2:
		t.Namespaces = slices.Clone(namespaces[:2])
	}
	// And those a namespaceSelector selects (with the namespaces named,
	// the union): every namespace, a team's, or, for a running pod's
	// term, all but a team's. kube-scheduler v1.36.3 reads a pending
	// pod's namespaceSelector wrongly when it matches a namespace
	// without labels (NotIn, DoesNotExist): InterPodAffinity's
	// mergeAffinityTermNamespacesIfNotEmpty sets the selector to
	// Nothing on a copy of the term, so the selector stays and is
	// matched against no labels, and pods of every namespace count.
	// gpuplane reads the namespaces' labels, as the API documents.
	switch g.pick(5) {
	case 1:
		t.NamespaceSelector = &metav1.LabelSelector{}
	case 2:
		t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{labelTeam: pickOf(g, teams)}}
	case 3:
		op := metav1.LabelSelectorOpIn
		if p.Spec.NodeName != "" {
			op = metav1.LabelSelectorOpNotIn
		}
		t.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: labelTeam, Operator: op, Values: []string{pickOf(g, teams)}}}}
	}
	// Pods of the same or another revision than p's: matchLabelKeys or
	// mismatchLabelKeys, merged into the selector as the API server
	// merges them when it admits p (kube-scheduler reads the selector
	// only).
	if v, ok := p.Labels[labelRev]; g.chance(0.3) {
		if g.chance(0.5) {
			t.MatchLabelKeys = []string{labelRev}
			if ok {
				t.LabelSelector.MatchExpressions = append(t.LabelSelector.MatchExpressions, metav1.LabelSelectorRequirement{Key: labelRev, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
			}
		} else {
			t.MismatchLabelKeys = []string{labelRev}
			if ok {
				t.LabelSelector.MatchExpressions = append(t.LabelSelector.MatchExpressions, metav1.LabelSelectorRequirement{Key: labelRev, Operator: metav1.LabelSelectorOpNotIn, Values: []string{v}})
			}
		}
	}
	return t
}

// podRequests is what a pod asks for, as kubelet and schedulers sum it.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}
