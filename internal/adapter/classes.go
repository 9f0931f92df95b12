package adapter

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corehelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// classLabelPrefix names the synthetic node labels through which the
// standard predicates the core's model cannot express (required node
// affinity, taint effects and operators) reach it: pods with the same
// selector, affinity and tolerations form a class, the nodes that pass
// component-helpers' checks for it carry the class label, and the pods'
// requests select it.
const classLabelPrefix = "gpuplane.io/class."

type podClass struct {
	id    int
	pod   *corev1.Pod // a representative
	match []bool      // per node of cycleInput.nodes
	all   bool
	// why counts, by reason, the schedulable nodes the class refuses,
	// most first: what a waiting pod's condition says of them.
	why []classReason
}

// classReason is how many nodes one static predicate refuses.
type classReason struct {
	reason string
	nodes  int
}

func classKey(p *corev1.Pod) string {
	var req *corev1.NodeSelector
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		req = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	b, err := json.Marshal(struct {
		S map[string]string
		A *corev1.NodeSelector
		T []corev1.Toleration
	}{p.Spec.NodeSelector, req, p.Spec.Tolerations})
	if err != nil {
		return p.Namespace + "/" + p.Name
	}
	// The pods of a workload have one class: its key is kept once (a
	// backlog of 40,000 alike pods held 8 MB of copies of it).
	classKeys.mu.Lock()
	defer classKeys.mu.Unlock()
	if k, ok := classKeys.m[string(b)]; ok {
		return k
	}
	k := string(b)
	return classKeys.share(k, k)
}

// classKeys shares the class keys of pending pods (classKey).
var classKeys = newSharedTable[string, string](maxInterned)

var untoleratedEffects = func(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// staticFit checks a pod against a node with component-helpers: required
// node affinity (which includes spec.nodeSelector) and untolerated taints.
// It returns "" or why not. Resources, extended ones included, are the
// core's to count (model.Request.Scalars), against what the node's pods
// hold.
func staticFit(log klog.Logger, p *corev1.Pod, n *corev1.Node) string {
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); err != nil || !ok {
		return "node affinity/selector mismatch"
	}
	if t, bad := corehelpers.FindMatchingUntoleratedTaint(log, n.Spec.Taints, p.Spec.Tolerations, untoleratedEffects, false); bad {
		return fmt.Sprintf("untolerated taint {%s: %s}", t.Key, t.Value)
	}
	return ""
}

// tolerateCordon is the core's toleration of an Unschedulable node
// (model.TaintUnschedulable).
var tolerateCordon = []model.Toleration{{Key: model.TaintUnschedulable, Exists: true}}

// cordonTolerations returns tolerateCordon when the pod's tolerations
// tolerate the NoSchedule taint node.kubernetes.io/unschedulable, which
// lets it onto a cordoned node as kube-scheduler's NodeUnschedulable does
// (a DaemonSet's pod, or one that tolerates every taint); nil otherwise.
func cordonTolerations(p *corev1.Pod) []model.Toleration {
	cordon := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if corehelpers.TolerationsTolerateTaint(klog.Background(), p.Spec.Tolerations, &cordon, false) {
		return tolerateCordon
	}
	return nil
}

// class returns the pod's predicate class, computing its node membership
// the first time a pod of the class is seen since the nodes last changed.
func (b *builder) class(pi *podInfo, used map[string]bool) *podClass {
	key := pi.class
	if key == "" {
		key = classKey(pi.pod)
	}
	cl := pi.cls
	if cl == nil || pi.clsGen != b.classGen {
		cl = b.classes[key]
		if cl == nil {
			p := pi.pod
			cl = &podClass{pod: p, match: make([]bool, len(b.nodes)), all: true}
			why := map[string]int{}
			for i, n := range b.nodes {
				r := staticFit(b.log, p, n.node)
				cl.match[i] = r == ""
				cl.all = cl.all && cl.match[i]
				if r != "" && !n.m.Unschedulable {
					why[r]++
				}
			}
			for r, n := range why {
				cl.why = append(cl.why, classReason{reason: r, nodes: n})
			}
			slices.SortFunc(cl.why, func(a, b classReason) int {
				if c := cmp.Compare(b.nodes, a.nodes); c != 0 {
					return c
				}
				return strings.Compare(a.reason, b.reason)
			})
			if cl.all && len(b.poolNodes) > 0 {
				aff := nodeaffinity.GetRequiredNodeAffinity(p)
				cl.all = !slices.ContainsFunc(b.poolNodes, func(n *corev1.Node) bool { return !affinityAdmits(aff, n) })
			}
			if !cl.all {
				cl.id = b.classID(key)
			}
			b.classes[key] = cl
		}
		pi.cls, pi.clsGen = cl, b.classGen
	}
	if !cl.all {
		used[key] = true
	}
	return cl
}

// classID is the number of the class with key (its node label is
// classLabelPrefix and the number): the one it had, if it had one when the
// nodes last changed.
func (b *builder) classID(key string) int {
	if id, ok := b.classIDs[key]; ok {
		return id
	}
	id := b.nextClass
	b.nextClass++
	b.classIDs[key] = id
	return id
}

// pinnedClass is a pod's class narrowed to the one node its allocated
// claims are on.
func (b *builder) pinnedClass(pi *podInfo, base *podClass, node string, used map[string]bool) *podClass {
	key := cmp.Or(pi.class, classKey(pi.pod)) + "\x00node=" + node
	cl := b.classes[key]
	if cl == nil {
		cl = &podClass{pod: pi.pod, id: b.classID(key), match: make([]bool, len(b.nodes))}
		other := 0
		for i, n := range b.nodes {
			if n.node.Name == node {
				cl.match[i] = base.match[i]
			} else if !n.m.Unschedulable {
				other++
			}
		}
		cl.why = append(slices.Clone(base.why), classReason{reason: "its ResourceClaims are allocated on node " + node, nodes: other})
		b.classes[key] = cl
	}
	used[key] = true
	return cl
}

// deviceNodesClass narrows a pending pod's class to the nodes that have
// the devices its claims ask for with admin access (dra.DeviceSet's
// AdminNodes, aligned with b.nodes).
func (b *builder) deviceNodesClass(pi *podInfo, base *podClass, nodes []bool, used map[string]bool) *podClass {
	mask := make([]byte, len(nodes))
	for i, ok := range nodes {
		mask[i] = '0'
		if ok {
			mask[i] = '1'
		}
	}
	key := cmp.Or(pi.class, classKey(pi.pod)) + "\x00devices=" + string(mask)
	cl := b.classes[key]
	if cl == nil {
		cl = &podClass{pod: pi.pod, id: b.classID(key), match: make([]bool, len(b.nodes))}
		other := 0
		for i, n := range b.nodes {
			cl.match[i] = base.match[i] && i < len(nodes) && nodes[i]
			if base.match[i] && !cl.match[i] && !n.m.Unschedulable {
				other++
			}
		}
		cl.why = append(slices.Clone(base.why), classReason{reason: "no devices its ResourceClaims ask for with admin access", nodes: other})
		b.classes[key] = cl
	}
	used[key] = true
	return cl
}

// modelNodesFor returns the core's nodes with the labels of the classes in
// use; the slice is reused while neither nodes nor classes change, so the
// core keeps its incremental state.
func (b *builder) modelNodesFor(used map[string]bool, sets map[string]*deviceSet, nodesChanged bool) []model.Node {
	keys := make([]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	names := make([]string, 0, len(sets))
	for k := range sets {
		names = append(names, k)
	}
	slices.Sort(names)
	domainKeys := len(b.domainKeys)
	if !nodesChanged && slices.Equal(keys, b.classKeys) && slices.Equal(names, b.dra.SetNames) && domainKeys == b.domainKeysN && b.modelNodes != nil {
		return b.modelNodes
	}
	b.classKeys, b.dra.SetNames, b.domainKeysN = keys, names, domainKeys
	inUse := make([]*deviceSet, len(names))
	for i, k := range names {
		inUse[i] = sets[k]
	}
	last := b.modelNodes
	b.modelNodes = make([]model.Node, len(b.nodes))
	for i, n := range b.nodes {
		m := n.m
		m.GPUs = withDeviceSets(m.GPUs, i, inUse)
		m.Labels = nil
		m.Domains = b.domainsOf(n)
		for _, k := range keys {
			cl := b.classes[k]
			if cl.match[i] {
				if m.Labels == nil {
					m.Labels = map[string]string{}
				}
				m.Labels[classLabelPrefix+strconv.Itoa(cl.id)] = "true"
			}
		}
		if len(last) == len(b.nodes) && last[i].Name == m.Name && maps.Equal(last[i].Labels, m.Labels) {
			// The core tells an unchanged node by its maps' identity.
			m.Labels = last[i].Labels
		}
		b.modelNodes[i] = m
	}
	if len(b.domains) > len(b.nodes) {
		maps.DeleteFunc(b.domains, func(name string, _ nodeDomains) bool { _, ok := b.nodeIndex[name]; return !ok })
	}
	return b.modelNodes
}

// poolClassLabels returns a node pool's labels (those its future nodes
// will carry) with the labels of the pod classes in use whose required
// node affinity and node selector admit such a node, as modelNodesFor
// gives them to a node. A class narrowed to some nodes (by claims,
// volumes) counts as the pod's own: the pool may add nodes of its kind.
// A label the pool's requirements leave open is read as the autoscaler
// may pick it: each of an In's values is tried (poolVariants), and a
// class that selects on a label open to any value is admitted. Taints are
// not read from the pool. Both err towards counting the pool, which can
// only let a gang wait for capacity rather than for the limits.
func (b *builder) poolClassLabels(r poolRoom) map[string]string {
	out := maps.Clone(r.labels)
	variants, loose := poolVariants(r)
	for _, k := range b.classKeys {
		cl := b.classes[k]
		if cl == nil || cl.pod == nil {
			continue
		}
		aff := nodeaffinity.GetRequiredNodeAffinity(cl.pod)
		if selectsAny(cl.pod, loose) || slices.ContainsFunc(variants, func(n *corev1.Node) bool { return affinityAdmits(aff, n) }) {
			if out == nil {
				out = map[string]string{}
			}
			out[classLabelPrefix+strconv.Itoa(cl.id)] = "true"
		}
	}
	return out
}

// affinityAdmits reports whether a pod's node selector and required node
// affinity (aff) admit node n; a term that cannot be read admits none.
func affinityAdmits(aff nodeaffinity.RequiredNodeAffinity, n *corev1.Node) bool {
	ok, err := aff.Match(n)
	return err == nil && ok
}

// maxPoolVariants bounds the label sets tried for one pool; the labels of
// Ins past it are read as open to any value.
const maxPoolVariants = 64

// poolVariants returns the nodes a pool may make as far as their labels
// go: its fixed labels with each combination of the values its Ins with
// several values allow, at most maxPoolVariants of them; and loose, the
// open labels the nodes leave out (any value, or past that bound).
func poolVariants(r poolRoom) (nodes []*corev1.Node, loose map[string]bool) {
	sets := []map[string]string{r.labels}
	for _, k := range slices.Sorted(maps.Keys(r.open)) {
		vs := r.open[k]
		if vs == nil || len(sets)*len(vs) > maxPoolVariants {
			if loose == nil {
				loose = map[string]bool{}
			}
			loose[k] = true
			continue
		}
		next := make([]map[string]string, 0, len(sets)*len(vs))
		for _, s := range sets {
			for _, v := range vs {
				m := maps.Clone(s)
				if m == nil {
					m = map[string]string{}
				}
				m[k] = v
				next = append(next, m)
			}
		}
		sets = next
	}
	nodes = make([]*corev1.Node, len(sets))
	for i, s := range sets {
		nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: s}}
	}
	return nodes, loose
}

// selectsAny reports whether p's node selector or required node
// affinity names one of the labels in keys.
func selectsAny(p *corev1.Pod, keys map[string]bool) bool {
	if len(keys) == 0 {
		return false
	}
	for k := range p.Spec.NodeSelector {
		if keys[k] {
			return true
		}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range t.MatchExpressions {
				if keys[e.Key] {
					return true
				}
			}
		}
	}
	return false
}
