package schedulerscale_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The workloads of kube-scheduler's scheduler_perf (k8s.io/kubernetes
// test/integration/scheduler_perf, v1.36.3: affinity/, misc/ and
// topology_spreading/performance-config.yaml with templates/), rebuilt
// here as Go objects of the same shape: the node template, the init pods
// and the measured pods of each, at upstream's "500Nodes" sizes scaled by
// nodes/500.

// Label keys the workloads place by.
const (
	labelHostname = "kubernetes.io/hostname"
	labelZone     = "topology.kubernetes.io/zone"
)

// perfRole is a pod's part in a workload: created before the measurement
// (init), measured, or created all along by the churn as upstream's
// Unschedulable does.
type perfRole string

const (
	roleInit    perfRole = "init"
	roleMeasure perfRole = "measure"
	roleChurn   perfRole = "churn"

	// perfRoleLabel marks each pod with its role, for the checks.
	perfRoleLabel = "schedperf.gpuplane.io/role"
	// perfHighPriority is the PriorityClass of the churn's pods; upstream
	// writes `priority: 10` into the spec, which the API server's Priority
	// admission refuses.
	perfHighPriority = "schedperf-high"
)

// perfNamespaces are a round's two namespaces: upstream's sched-0 (init
// pods) and sched-1 (measured pods), whose names the affinity terms list.
type perfNamespaces struct{ init, measure string }

// perfPod builds one pod of a workload in namespace ns for the round's
// namespaces.
type perfPod func(ns perfNamespaces) *corev1.Pod

// perfWorkload is one scheduler_perf workload.
type perfWorkload struct {
	name string
	// zones are the topology.kubernetes.io/zone values given to the nodes
	// round robin (upstream's labelNodePrepareStrategy); none: no zone.
	zones []string
	// initPods and measurePods are upstream's counts at 500 nodes.
	initPods, measurePods int
	init, measure         perfPod
	// churn, when set, is created every churnInterval from before the
	// measured pods until they are all bound (upstream's churn op).
	churn perfPod
	// check says how the outcome breaks the workload's required
	// constraint; nil when it has none beyond every measured pod bound.
	check func(o *perfOutcome) error
	// preference measures how well a preferred constraint was kept (lower
	// is better): gpuplane-scheduler must keep it at least as well as
	// kube-scheduler did in the same run.
	preference *perfPreference
	// bindOnlyOneZone: the bind-only rounds bind to the first zone's nodes
	// only, which the workload's required zone affinity asks for.
	bindOnlyOneZone bool
}

// perfPreference is a preferred constraint's measure.
type perfPreference struct {
	unit    string // the benchmark metric's unit
	what    string // what the number counts, for a failure
	measure func(o *perfOutcome) float64
}

// scaled is n of upstream's 500 nodes at nodes, never below one pod.
func scaled(n, nodes int) int { return max(1, n*nodes/500) }

// perfWorkloads are the workloads in the order they run.
var perfWorkloads = []perfWorkload{
	{
		name: "SchedulingBasic", initPods: 500, measurePods: 1000,
		init: defaultPod(roleInit), measure: defaultPod(roleMeasure),
	},
	{
		name: "SchedulingPodAntiAffinity", initPods: 100, measurePods: 400,
		init: antiAffinityPod(roleInit), measure: antiAffinityPod(roleMeasure),
		check: func(o *perfOutcome) error {
			return o.atMostOnePerDomain("podAntiAffinity required", "color", "green", labelHostname)
		},
	},
	{
		name: "SchedulingPodAffinity", zones: []string{"zone1"}, initPods: 500, measurePods: 1000,
		init: affinityPod(roleInit), measure: affinityPod(roleMeasure),
		check: func(o *perfOutcome) error {
			return o.oneDomain("podAffinity required", "color", "blue", labelZone)
		},
	},
	{
		// Not upstream's: SchedulingPodAffinity with the nodes over three
		// zones. Upstream puts every node in zone1, where its check holds
		// whatever the scheduler does; here a scheduler that ignores the
		// affinity spreads the pods over the zones and the check fails.
		name: "SchedulingPodAffinityZones", zones: []string{"zone1", "zone2", "zone3"}, initPods: 500, measurePods: 1000,
		init: affinityPod(roleInit), measure: affinityPod(roleMeasure),
		check: func(o *perfOutcome) error {
			return o.oneDomain("podAffinity required", "color", "blue", labelZone)
		},
		bindOnlyOneZone: true,
	},
	{
		name: "SchedulingPreferredPodAffinity", initPods: 500, measurePods: 1000,
		init: preferredAffinityPod(roleInit), measure: preferredAffinityPod(roleMeasure),
		preference: &perfPreference{unit: "pods-alone", what: "pods labelled color=red with no other on their node",
			measure: func(o *perfOutcome) float64 { return float64(o.alone("color", "red", labelHostname)) }},
	},
	{
		name: "SchedulingPreferredPodAntiAffinity", initPods: 500, measurePods: 1000,
		init: preferredAntiAffinityPod(roleInit), measure: preferredAntiAffinityPod(roleMeasure),
		preference: &perfPreference{unit: "most-on-a-node", what: "the most pods labelled color=yellow on one node",
			measure: func(o *perfOutcome) float64 { return float64(o.mostInDomain("color", "yellow", labelHostname)) }},
	},
	{
		name: "TopologySpreading", zones: []string{"moon-1", "moon-2", "moon-3"}, initPods: 1000, measurePods: 1000,
		init: defaultPod(roleInit), measure: spreadPod(roleMeasure, corev1.DoNotSchedule),
		check: func(o *perfOutcome) error {
			if skew := o.skew("color", "blue", labelZone); skew > 5 {
				return fmt.Errorf("topologySpreadConstraints DoNotSchedule broken: pods labelled color=blue over %s %s, skew %d > maxSkew 5",
					labelZone, o.perDomainString("color", "blue", labelZone), skew)
			}
			return nil
		},
	},
	{
		name: "PreferredTopologySpreading", zones: []string{"moon-1", "moon-2", "moon-3"}, initPods: 1000, measurePods: 1000,
		init: defaultPod(roleInit), measure: spreadPod(roleMeasure, corev1.ScheduleAnyway),
		preference: &perfPreference{unit: "zone-skew", what: "the skew of pods labelled color=blue over zones",
			measure: func(o *perfOutcome) float64 { return float64(o.skew("color", "blue", labelZone)) }},
	},
	{
		name: "SchedulingNodeAffinity", zones: []string{"zone1"}, initPods: 500, measurePods: 1000,
		init: nodeAffinityPod(roleInit), measure: nodeAffinityPod(roleMeasure),
		check: func(o *perfOutcome) error { return o.onZones("zone1", "zone2") },
	},
	{
		name: "Unschedulable", initPods: 10, measurePods: 1000,
		init: defaultPod(roleInit), measure: defaultPod(roleMeasure), churn: largeCPUPod,
		check: func(o *perfOutcome) error {
			churn := o.pods(roleChurn)
			if len(churn) == 0 {
				return errors.New("no pod of the churn was created: nothing to check")
			}
			for _, p := range churn {
				if p.Spec.NodeName != "" {
					return fmt.Errorf("pod %s/%s asks for 9 CPUs and every node has 4, yet it was bound to %s", p.Namespace, p.Name, p.Spec.NodeName)
				}
			}
			return nil
		},
	},
}

// perfNode is upstream's node template (templates/node-default.yaml, and
// the base node of workloads that name none): 4 CPUs, 32 GiB, 110 pods,
// no GPU; kwok's mark and the labels a kubelet would set added.
func perfNode(name, bench string) *corev1.Node {
	list := corev1.ResourceList{
		corev1.ResourcePods:   resource.MustParse("110"),
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{labelHostname: name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok", "bench": bench},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{Capacity: list, Allocatable: list.DeepCopy()},
	}
}

// pausePod is upstream's templates/pod-default.yaml: one pause container
// with port 80, 100m CPU and 500Mi of memory as requests and limits.
func pausePod(role perfRole) *corev1.Pod {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("500Mi")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{perfRoleLabel: string(role)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: "registry.k8s.io/pause:3.10.2",
			Ports:     []corev1.ContainerPort{{ContainerPort: 80}},
			Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
		}}},
	}
}

func defaultPod(role perfRole) perfPod {
	return func(perfNamespaces) *corev1.Pod { return pausePod(role) }
}

// term is a pod affinity term over pods labelled color=<color> in both of
// the round's namespaces.
func term(ns perfNamespaces, color, topologyKey string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"color": color}},
		TopologyKey:   topologyKey,
		Namespaces:    []string{ns.measure, ns.init},
	}
}

// antiAffinityPod is templates/pod-with-pod-anti-affinity.yaml.
func antiAffinityPod(role perfRole) perfPod {
	return func(ns perfNamespaces) *corev1.Pod {
		p := pausePod(role)
		p.Labels["color"] = "green"
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(ns, "green", labelHostname)}}}
		return p
	}
}

// affinityPod is templates/pod-with-pod-affinity.yaml.
func affinityPod(role perfRole) perfPod {
	return func(ns perfNamespaces) *corev1.Pod {
		p := pausePod(role)
		p.Labels["color"] = "blue"
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(ns, "blue", labelZone)}}}
		return p
	}
}

// preferredAffinityPod is templates/pod-with-preferred-pod-affinity.yaml.
func preferredAffinityPod(role perfRole) perfPod {
	return func(ns perfNamespaces) *corev1.Pod {
		p := pausePod(role)
		p.Labels["color"] = "red"
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term(ns, "red", labelHostname)}}}}
		return p
	}
}

// preferredAntiAffinityPod is
// templates/pod-with-preferred-pod-anti-affinity.yaml.
func preferredAntiAffinityPod(role perfRole) perfPod {
	return func(ns perfNamespaces) *corev1.Pod {
		p := pausePod(role)
		p.Labels["color"] = "yellow"
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term(ns, "yellow", labelHostname)}}}}
		return p
	}
}

// spreadPod is templates/pod-with-topology-spreading.yaml (DoNotSchedule)
// or pod-with-preferred-topology-spreading.yaml (ScheduleAnyway).
func spreadPod(role perfRole, when corev1.UnsatisfiableConstraintAction) perfPod {
	return func(perfNamespaces) *corev1.Pod {
		p := pausePod(role)
		p.Labels["color"] = "blue"
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 5, TopologyKey: labelZone, WhenUnsatisfiable: when,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"color": "blue"}},
		}}
		return p
	}
}

// nodeAffinityPod is templates/pod-with-node-affinity.yaml.
func nodeAffinityPod(role perfRole) perfPod {
	return func(perfNamespaces) *corev1.Pod {
		p := pausePod(role)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: labelZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone1", "zone2"}}},
			}}}}}
		return p
	}
}

// largeCPUPod is templates/pod-high-priority-large-cpu.yaml: 9 CPUs, more
// than any node has, at priority 10.
func largeCPUPod(perfNamespaces) *corev1.Pod {
	p := pausePod(roleChurn)
	c := &p.Spec.Containers[0]
	c.Image = "registry.k8s.io/pause:3.10.1"
	c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("9"), corev1.ResourceMemory: resource.MustParse("500Mi")}}
	p.Spec.PriorityClassName = perfHighPriority
	return p
}

// perfOutcome is a round's end state, read from the API server.
type perfOutcome struct {
	nodes map[string]*corev1.Node
	all   []*corev1.Pod
}

func (o *perfOutcome) pods(role perfRole) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range o.all {
		if p.Labels[perfRoleLabel] == string(role) {
			out = append(out, p)
		}
	}
	return out
}

// bound checks that every init and measured pod is bound to one of the
// workload's nodes.
func (o *perfOutcome) bound() error {
	var pending []string
	for _, p := range o.all {
		if p.Labels[perfRoleLabel] == string(roleChurn) {
			continue
		}
		if p.Spec.NodeName == "" {
			pending = append(pending, p.Namespace+"/"+p.Name)
			continue
		}
		if o.nodes[p.Spec.NodeName] == nil {
			return fmt.Errorf("pod %s/%s is bound to %s, not one of the workload's nodes", p.Namespace, p.Name, p.Spec.NodeName)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("%d pods not bound, e.g. %s", len(pending), strings.Join(pending[:min(3, len(pending))], ", "))
	}
	return nil
}

// fit checks that no node holds more than it can: the CPU, memory and
// pods the bound pods ask for (their containers' requests) within the
// node's allocatable, as kube-scheduler's NodeResourcesFit keeps it for
// every workload.
func (o *perfOutcome) fit() error {
	used := map[string]corev1.ResourceList{}
	for _, p := range o.all {
		if p.Spec.NodeName == "" {
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = corev1.ResourceList{}
			used[p.Spec.NodeName] = u
		}
		for _, c := range p.Spec.Containers {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				q := u[r]
				q.Add(c.Resources.Requests[r])
				u[r] = q
			}
		}
		q := u[corev1.ResourcePods]
		q.Add(resource.MustParse("1"))
		u[corev1.ResourcePods] = q
	}
	var over []string
	for _, name := range slices.Sorted(maps.Keys(used)) {
		n := o.nodes[name]
		if n == nil {
			continue
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
			alloc, q := n.Status.Allocatable[r], used[name][r]
			if q.Cmp(alloc) > 0 {
				over = append(over, fmt.Sprintf("%s: %s %s of %s allocatable", name, r, q.String(), alloc.String()))
			}
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("nodes over their allocatable (NodeResourcesFit broken) on %d counts, e.g. %s", len(over), strings.Join(over[:min(3, len(over))], "; "))
	}
	return nil
}

// perDomain counts the bound pods labelled key=value by their node's
// topologyKey label; every node with the label is a domain, empty or not.
func (o *perfOutcome) perDomain(key, value, topologyKey string) map[string][]string {
	out := map[string][]string{}
	for _, n := range o.nodes {
		if d, ok := n.Labels[topologyKey]; ok {
			if _, seen := out[d]; !seen {
				out[d] = nil
			}
		}
	}
	for _, p := range o.all {
		if p.Labels[key] != value || p.Spec.NodeName == "" {
			continue
		}
		n := o.nodes[p.Spec.NodeName]
		if n == nil {
			continue
		}
		if d, ok := n.Labels[topologyKey]; ok {
			out[d] = append(out[d], p.Namespace+"/"+p.Name)
		}
	}
	return out
}

func (o *perfOutcome) perDomainString(key, value, topologyKey string) string {
	m := o.perDomain(key, value, topologyKey)
	parts := make([]string, 0, len(m))
	for _, d := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", d, len(m[d])))
	}
	return strings.Join(parts, " ")
}

// atMostOnePerDomain is required anti-affinity among pods labelled
// key=value: no two in one topologyKey domain.
func (o *perfOutcome) atMostOnePerDomain(what, key, value, topologyKey string) error {
	var broken []string
	for d, pods := range o.perDomain(key, value, topologyKey) {
		if len(pods) > 1 {
			broken = append(broken, fmt.Sprintf("%s holds %d (%s)", d, len(pods), strings.Join(pods[:min(3, len(pods))], ", ")))
		}
	}
	if len(broken) > 0 {
		slices.Sort(broken)
		return fmt.Errorf("%s broken: %d %s domains hold more than one pod labelled %s=%s, e.g. %s",
			what, len(broken), topologyKey, key, value, strings.Join(broken[:min(3, len(broken))], "; "))
	}
	return nil
}

// oneDomain is required affinity of every pod labelled key=value to the
// others: all in one topologyKey domain (the first pod may go anywhere,
// every later one must join it).
func (o *perfOutcome) oneDomain(what, key, value, topologyKey string) error {
	var used []string
	for d, pods := range o.perDomain(key, value, topologyKey) {
		if len(pods) > 0 {
			used = append(used, fmt.Sprintf("%s=%d", d, len(pods)))
		}
	}
	if len(used) > 1 {
		slices.Sort(used)
		return fmt.Errorf("%s broken: pods labelled %s=%s are in %d %s domains (%s), not one", what, key, value, len(used), topologyKey, strings.Join(used, " "))
	}
	for _, p := range o.all {
		if p.Labels[key] == value && p.Spec.NodeName != "" {
			if _, ok := o.nodes[p.Spec.NodeName].Labels[topologyKey]; !ok {
				return fmt.Errorf("%s broken: pod %s/%s is on node %s, which has no %s label", what, p.Namespace, p.Name, p.Spec.NodeName, topologyKey)
			}
		}
	}
	return nil
}

// skew is the most minus the fewest pods labelled key=value in a
// topologyKey domain.
func (o *perfOutcome) skew(key, value, topologyKey string) int {
	lo, hi := -1, 0
	for _, pods := range o.perDomain(key, value, topologyKey) {
		if lo < 0 || len(pods) < lo {
			lo = len(pods)
		}
		hi = max(hi, len(pods))
	}
	return hi - max(lo, 0)
}

// mostInDomain is the most pods labelled key=value in one domain.
func (o *perfOutcome) mostInDomain(key, value, topologyKey string) int {
	most := 0
	for _, pods := range o.perDomain(key, value, topologyKey) {
		most = max(most, len(pods))
	}
	return most
}

// alone counts the pods labelled key=value that no other such pod shares
// a domain with.
func (o *perfOutcome) alone(key, value, topologyKey string) int {
	n := 0
	for _, pods := range o.perDomain(key, value, topologyKey) {
		if len(pods) == 1 {
			n++
		}
	}
	return n
}

// onZones is required node affinity: every pod on a node whose zone is
// one of zones.
func (o *perfOutcome) onZones(zones ...string) error {
	for _, p := range o.all {
		if p.Spec.NodeName == "" || p.Labels[perfRoleLabel] == string(roleChurn) {
			continue
		}
		if z := o.nodes[p.Spec.NodeName].Labels[labelZone]; !slices.Contains(zones, z) {
			return fmt.Errorf("nodeAffinity broken: pod %s/%s is on %s, whose %s is %q, not one of %v", p.Namespace, p.Name, p.Spec.NodeName, labelZone, z, zones)
		}
	}
	return nil
}
