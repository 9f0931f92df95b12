package adapter

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	corehelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// classLabelPrefix names the synthetic node labels through which the
// standard predicates the core's model cannot express (required node
// affinity, taint effects and operators) reach it: pods with the same
// selector, affinity and tolerations form a class, the nodes that pass
// component-helpers' checks for it carry the class label, and the pods'
// requests select it.
const classLabelPrefix = "gpuplane.io/class."

// groupInfo is one pod group as the adapter tracks it across a cycle.
type groupInfo struct {
	name      string // the core's name
	pgKey     string // namespace/name of the PodGroup, "" for a lone pod
	pg        *v1alpha1.PodGroup
	queue     string
	minMember int
	pending   []*podInfo // offered to the core (or held back)
	bound     []*podInfo // bound or being bound, not finished
	finished  []*podInfo
	// held says why the group was not offered to the core this cycle.
	held *BadInputError
	// minResources is the PodGroup's spec.minResources, checked.
	minResources model.Resources
}

// pendingPod returns the group's pending pod with the given key, or nil.
func (g *groupInfo) pendingPod(key string) *podInfo {
	for _, pi := range g.pending {
		if pi.key == key {
			return pi
		}
	}
	return nil
}

// cycleInput is a snapshot plus what the adapter needs to act on the
// decisions.
type cycleInput struct {
	snap   model.Snapshot
	nodes  []*nodeInfo
	groups map[string]*groupInfo
	// badPods are pods held back by their own spec.
	badPods []*podInfo
	// queueErrs says why a Queue was left out of the hierarchy.
	queueErrs map[string]*BadInputError
	queueObjs map[string]*v1alpha1.Queue
	// admits holds the namespace selector of each queue that has one
	// (spec.namespaceSelector).
	admits    map[string]labels.Selector
	startedAt time.Time
	// claims are the ResourceClaims of the pending pods that name some,
	// by pod key.
	claims map[string]*podClaims
}

type podClass struct {
	id    int
	pod   *corev1.Pod // a representative
	match []bool      // per node of cycleInput.nodes
	all   bool
	// why counts, by reason, the schedulable nodes the class refuses,
	// most first: what a waiting pod's condition says of them.
	why []classReason
	// extended is what the class asks of extended resources the core
	// does not model (otherExtended), computed once for all nodes.
	extended corev1.ResourceList
}

// classReason is how many nodes one static predicate refuses.
type classReason struct {
	reason string
	nodes  int
}

// builder turns the cache into snapshots; it lives on the cycle goroutine
// and keeps, between cycles, the converted node list, the class
// memberships and each node's allocations, so that a cycle recomputes only
// what changed since the last one.
type builder struct {
	schedulerName string
	budget        int
	log           klog.Logger

	nodesVersion int
	nodes        []*nodeInfo
	modelNodes   []model.Node
	classes      map[string]*podClass
	classGen     int      // bumped when classes are recomputed
	classKeys    []string // active class keys with a label, sorted
	nextClass    int

	// groupQueues memoizes, within one runningAllocations, each PodGroup's
	// queue (allocationQueue).
	groupQueues map[string]string

	// nodeAllocs holds each node's allocations; a node's slice is
	// replaced, never changed, when its pods change (the core relies on
	// it: model.Snapshot.RunningByNode).
	nodeAllocs map[string][]model.Allocation

	// dra is the DRA memo: the device sets of pending pods' claims.
	dra draMemo
}

func newBuilder(schedulerName string, budget int, log klog.Logger) *builder {
	return &builder{schedulerName: schedulerName, budget: budget, log: log, nodesVersion: -1, classes: map[string]*podClass{},
		nodeAllocs: map[string][]model.Allocation{}}
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
		R corev1.ResourceList
	}{p.Spec.NodeSelector, req, p.Spec.Tolerations, otherExtended(p)})
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
// node affinity (which includes spec.nodeSelector) and untolerated taints;
// and that the node offers at least extended, what the pod asks of
// extended resources the core does not model (otherExtended). It returns
// "" or why not.
func staticFit(log klog.Logger, p *corev1.Pod, extended corev1.ResourceList, n *corev1.Node) string {
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); err != nil || !ok {
		return "node affinity/selector mismatch"
	}
	if t, bad := corehelpers.FindMatchingUntoleratedTaint(log, n.Spec.Taints, p.Spec.Tolerations, untoleratedEffects, false); bad {
		return fmt.Sprintf("untolerated taint {%s: %s}", t.Key, t.Value)
	}
	for name, want := range extended {
		if have := n.Status.Allocatable[name]; have.Cmp(want) < 0 {
			return "insufficient " + string(name)
		}
	}
	return ""
}

// otherExtended is what a pod asks of extended resources the core does
// not model (everything but nvidia.com/gpu, its shares, MIG devices and the
// resources that ask for part of a GPU: an RDMA device, say); nil when
// nothing.
func otherExtended(p *corev1.Pod) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
		if !isExtended(name) || name == ResourceGPU || name == ResourceGPUShared || strings.HasPrefix(string(name), migResourcePrefix) || gpupod.IsFractionResource(name) ||
			strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix) {
			continue
		}
		if out == nil {
			out = corev1.ResourceList{}
		}
		out[name] = q
	}
	return out
}

// build assembles the next snapshot. The caller holds c.mu.
func (b *builder) build(c *clusterCache, r *refusals, now time.Time) *cycleInput {
	// The cycle reads in's maps after the lock is released: they are
	// copies (of pointers to immutable entries), never the cache's own.
	in := &cycleInput{groups: map[string]*groupInfo{}, queueErrs: map[string]*BadInputError{},
		queueObjs: maps.Clone(c.queues), startedAt: now}
	nodesChanged := b.nodesVersion != c.nodesVersion
	if nodesChanged {
		b.nodesVersion = c.nodesVersion
		b.nodes = b.nodes[:0]
		for _, n := range c.nodes {
			b.nodes = append(b.nodes, n)
		}
		slices.SortFunc(b.nodes, func(x, y *nodeInfo) int { return cmp.Compare(x.node.Name, y.node.Name) })
		b.classes = map[string]*podClass{}
		b.classGen++
	}
	in.nodes = b.nodes
	in.snap.Queues = b.queues(c, in)
	// valid: true for a leaf queue of the hierarchy, false for a parent.
	valid := map[string]bool{queue.DefaultQueue: true}
	for _, q := range in.snap.Queues {
		if _, seen := valid[q.Name]; !seen {
			valid[q.Name] = true
		}
		if q.Parent != "" {
			valid[q.Parent] = false
		}
	}

	// 1. Groups from the cache's group index: placed members count toward
	//    the gang, our pending ones are offered to the core.
	for name, members := range c.members {
		var g *groupInfo
		for _, pi := range members {
			if g == nil {
				g = b.newGroup(c, in, pi, members, valid)
				in.groups[name] = g
			}
			_, isAssumed := c.assumed[pi.key]
			switch p := pi.pod; {
			case pi.terminal():
				g.finished = append(g.finished, pi)
			case pi.bound() || isAssumed:
				g.bound = append(g.bound, pi)
			case p.Spec.SchedulerName != b.schedulerName, p.DeletionTimestamp != nil:
			case pi.awaiting:
				// Its workload's group is being made; the pod is labelled
				// with it in a moment.
			case len(p.Spec.SchedulingGates) > 0:
				// Gated pods are not ready to be scheduled; the API server
				// already says so on the pod (SchedulingGated).
			case pi.bad != nil:
				in.badPods = append(in.badPods, pi)
			default:
				g.pending = append(g.pending, pi)
			}
		}
	}

	// 2. Running allocations, recomputed for the nodes whose pods changed.
	in.snap.RunningByNode = b.runningAllocations(c, r, now)

	// 3. Pending groups; groups held back for what they say stay out. The core orders them
	//    itself (priority, age, name), so map order is fine here.
	used := map[string]bool{}
	sets := map[string]*deviceSet{}
	for name, g := range in.groups {
		if len(g.pending) == 0 {
			continue
		}
		if g.held != nil {
			continue
		}
		// Pods that ask through ResourceClaims: the claims to allocate
		// and the devices that may serve them, or why the group waits.
		for _, pi := range g.pending {
			pc, bad := b.podClaims(c, pi, now)
			if pc == nil && bad == nil {
				continue
			}
			if bad != nil {
				g.held = badInput(bad.Reason, "pod %s: %s", pi.key, bad.Msg)
				break
			}
			if in.claims == nil {
				in.claims = map[string]*podClaims{}
			}
			in.claims[pi.key] = pc
		}
		if g.held != nil {
			continue
		}
		total := len(g.pending) + len(g.bound) + len(g.finished)
		if g.minMember > total {
			g.held = badInput("NotEnoughPods", "PodGroup %s needs minMember %d pods but has %d: lower spec.minMember or create the missing pods", g.pgKey, g.minMember, total)
			continue
		}
		// What the gang still needs is the core's one rule (PodGroup.Min):
		// its size less the members bound or finished.
		pg := model.PodGroup{Name: name, Queue: g.queue, MinMember: max(1, g.minMember), Placed: len(g.bound) + len(g.finished), CreatedAt: 0}
		if len(g.pending) > 1 {
			slices.SortFunc(g.pending, func(x, y *podInfo) int { return cmp.Compare(x.key, y.key) })
		}
		pg.Pods = make([]model.Pod, 0, len(g.pending))
		for i, pi := range g.pending {
			cl := b.class(pi, used)
			req := pi.req
			if pc := in.claims[pi.key]; pc != nil {
				if pc.set != nil {
					req.DeviceSet = pc.set.Name
					switch {
					case pc.set.MIGSlices > 0:
						req.MIGSlices, req.MIGProfile = pc.set.MIGSlices, pc.set.MIGProfile
					case pc.set.Share:
						req.GPUMilli, req.GPUMemoryMiB = pc.set.ShareMilli, pc.set.ShareMemMiB
					default:
						req.GPUs = pc.set.Count
					}
					sets[pc.set.Name] = pc.set
				}
				if pc.erClaim != nil && pc.set == nil {
					// Its claim is allocated already: the devices are the
					// claim's, the pod only joins it on its node.
					req.GPUs = 0
				}
				if pc.node != "" {
					cl = b.pinnedClass(pi, cl, pc.node, used)
				}
			}
			if !cl.all {
				req.NodeSelector = map[string]string{classLabelPrefix + strconv.Itoa(cl.id): "true"}
			}
			pg.Pods = append(pg.Pods, model.Pod{Name: pi.key, Request: req})
			created := pi.pod.CreationTimestamp.UnixMilli()
			if i == 0 || created < pg.CreatedAt {
				pg.CreatedAt = created
			}
			pg.Priority = max(pg.Priority, podPriority(pi.pod))
		}
		if g.pg != nil {
			if v, ok := c.classes[g.pg.Spec.PriorityClassName]; ok {
				pg.Priority = max(pg.Priority, v)
			}
			pg.CreatedAt = min(pg.CreatedAt, g.pg.CreationTimestamp.UnixMilli())
			pg.MinResources = g.minResources
		}
		in.snap.Pending = append(in.snap.Pending, pg)
	}
	in.snap.Nodes = b.modelNodesFor(used, sets, nodesChanged)
	in.snap.Budget = model.DisruptionBudget{MaxEvictions: b.budget}
	in.snap.Now = now.UnixMilli()
	return in
}

func podPriority(p *corev1.Pod) int32 { return corehelpers.PodPriority(p) }

func (b *builder) newGroup(c *clusterCache, in *cycleInput, pi *podInfo, members map[string]*podInfo, valid map[string]bool) *groupInfo {
	g := &groupInfo{name: pi.group, pgKey: pi.pg, minMember: 1}
	pgQueue := ""
	if pi.pg != "" {
		g.pg = c.podGroups[pi.pg]
		if g.pg == nil {
			g.held = badInput("PodGroupNotFound", "pod group %s does not exist: create the PodGroup or remove the pod's %s", pi.pg, cmp.Or(pi.groupFrom, v1alpha1.GroupKeys[0]))
		} else {
			g.minMember = int(g.pg.Spec.MinMember)
			pgQueue = g.pg.Spec.Queue
			mr, err := boundedResources("spec.minResources", g.pg.Spec.MinResources)
			switch {
			case err != nil:
				g.held = badInput("InvalidPodGroup", "PodGroup %s: %v", pi.pg, err)
			case g.minMember < 0:
				g.held = badInput("InvalidPodGroup", "PodGroup %s: spec.minMember: must not be negative, got %d", pi.pg, g.minMember)
			}
			g.minResources = mr
		}
	}
	q, mismatch := groupQueue(c, pi, members, pgQueue)
	g.queue = q
	if g.held == nil && mismatch != nil {
		g.held = mismatch
	}
	leaf, known := valid[q]
	switch {
	case g.held != nil:
	case !known:
		why := "does not exist"
		if _, ok := c.queues[q]; ok {
			why = "is invalid (see its Valid condition)"
		}
		g.held = badInput("UnknownQueue", "queue %q %s: create it, fix it, or set the pod's %s label to an existing queue", q, why, v1alpha1.QueueLabel)
	case !leaf:
		// Work runs in leaf queues: a parent lends and reclaims its
		// children's guarantees, and fairness between queues is defined
		// for the leaves.
		g.held = badInput("QueueNotLeaf", "queue %q has child queues and takes no work itself: submit to one of its children", q)
	default:
		g.held = admitsNamespace(c, in, q, pi.pod.Namespace)
	}
	return g
}

// groupQueue resolves a group's queue: its PodGroup's spec.queue (the
// group's own word, over whatever its pods say), else the queue its members
// name (v1alpha1.QueueKeys), else the namespace's default, else the
// built-in default. Members that name different queues make the group wait
// (QueueMismatch) rather than have one of them win by the order they were
// seen in.
func groupQueue(c *clusterCache, pi *podInfo, members map[string]*podInfo, pgQueue string) (string, *BadInputError) {
	if pgQueue != "" {
		return pgQueue, nil
	}
	// The member with the least key decides, so that the group's queue and
	// the reason it waits do not depend on map order.
	var first *podInfo
	for _, m := range members {
		if m.queue.Value != "" && !m.terminal() && (first == nil || m.key < first.key) {
			first = m
		}
	}
	if first == nil {
		return podQueue(c, pi, ""), nil
	}
	want, from := first.queue.Value, fmt.Sprintf("pod %s's %s", first.key, first.queue.From)
	var mismatch *podInfo
	for _, m := range members {
		if m.queue.Value != "" && m.queue.Value != want && !m.terminal() && (mismatch == nil || m.key < mismatch.key) {
			mismatch = m
		}
	}
	if mismatch != nil {
		return want, badInput("QueueMismatch", "the pods of group %s name different queues: %s names %q, pod %s's %s names %q; give every pod the same queue",
			strings.TrimPrefix(pi.group, "pg/"), from, want, mismatch.key, mismatch.queue.From, mismatch.queue.Value)
	}
	return want, nil
}

// admitsNamespace checks that queue q and the queues above it admit pods
// of namespace ns (spec.namespaceSelector).
func admitsNamespace(c *clusterCache, in *cycleInput, q, ns string) *BadInputError {
	if len(in.admits) == 0 {
		return nil
	}
	nsLabels := labels.Set(c.nsLabels[ns])
	for seen := 0; q != "" && seen <= len(in.queueObjs); seen++ {
		if sel, ok := in.admits[q]; ok && !sel.Matches(nsLabels) {
			return badInput("QueueNotAllowed", "namespace %s may not submit to queue %q: queue %q admits only namespaces matching %s (spec.namespaceSelector); use a queue that admits %s, or ask the queue's owner to admit it",
				ns, q, q, truncate(sel.String()), ns)
		}
		obj := in.queueObjs[q]
		if obj == nil {
			break
		}
		q = obj.Spec.Parent
	}
	return nil
}

// podQueue resolves a pod's queue: its PodGroup's (pgQueue), the queue its
// own labels or annotations name, its namespace's default, the built-in
// default.
func podQueue(c *clusterCache, pi *podInfo, pgQueue string) string {
	for _, v := range []string{pgQueue, pi.queue.Value, c.nsQueue[pi.pod.Namespace]} {
		if v != "" {
			return v
		}
	}
	return queue.DefaultQueue
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
			cl = &podClass{pod: p, match: make([]bool, len(b.nodes)), all: true, extended: otherExtended(p)}
			why := map[string]int{}
			for i, n := range b.nodes {
				r := staticFit(b.log, p, cl.extended, n.node)
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
			if !cl.all {
				cl.id = b.nextClass
				b.nextClass++
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

// pinnedClass is a pod's class narrowed to the one node its allocated
// claims are on.
func (b *builder) pinnedClass(pi *podInfo, base *podClass, node string, used map[string]bool) *podClass {
	key := cmp.Or(pi.class, classKey(pi.pod)) + "\x00node=" + node
	cl := b.classes[key]
	if cl == nil {
		cl = &podClass{pod: pi.pod, id: b.nextClass, match: make([]bool, len(b.nodes)), extended: base.extended}
		b.nextClass++
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
	if !nodesChanged && slices.Equal(keys, b.classKeys) && slices.Equal(names, b.dra.setNames) && b.modelNodes != nil {
		return b.modelNodes
	}
	b.classKeys, b.dra.setNames = keys, names
	inUse := make([]*deviceSet, len(names))
	for i, k := range names {
		inUse[i] = sets[k]
	}
	b.modelNodes = make([]model.Node, len(b.nodes))
	for i, n := range b.nodes {
		m := n.m
		m.GPUs = withDeviceSets(m.GPUs, i, inUse)
		m.Labels = nil
		for _, k := range keys {
			cl := b.classes[k]
			if cl.match[i] {
				if m.Labels == nil {
					m.Labels = map[string]string{}
				}
				m.Labels[classLabelPrefix+strconv.Itoa(cl.id)] = "true"
			}
		}
		b.modelNodes[i] = m
	}
	return b.modelNodes
}

// runningAllocations returns each node's allocations, aligned with
// b.nodes, recomputing only the nodes the cache marked dirty (and those
// whose refusals expired). An unchanged node's chunk is the very slice of
// the last snapshot, which tells the core to skip it. Caller holds c.mu.
func (b *builder) runningAllocations(c *clusterCache, r *refusals, now time.Time) [][]model.Allocation {
	if b.groupQueues == nil {
		b.groupQueues = map[string]string{}
	}
	clear(b.groupQueues)
	for _, pod := range r.expire(now) {
		if pi := c.pods[pod]; pi != nil {
			if n := c.nodeOf(pi); n != "" {
				c.dirty[n] = true
			}
		}
	}
	if c.allDirty {
		c.allDirty = false
		for n := range c.nodes {
			c.dirty[n] = true
		}
	}
	for n := range c.dirty {
		if ni := c.nodes[n]; ni != nil {
			b.nodeAllocs[n] = b.nodeAllocations(c, r, ni, now)
		} else {
			delete(b.nodeAllocs, n)
		}
	}
	clear(c.dirty)
	out := make([][]model.Allocation, len(b.nodes))
	for i, n := range b.nodes {
		out[i] = b.nodeAllocs[n.node.Name]
	}
	return out
}

// nodeAllocations lists the allocations of the pods holding one node,
// with the GPU shares nodeHoldings resolves for each; a pod that would
// over-allocate the node is left out with a log line (the core refuses
// over-allocated snapshots). Caller holds c.mu.
func (b *builder) nodeAllocations(c *clusterCache, r *refusals, ni *nodeInfo, now time.Time) []model.Allocation {
	pods := c.onNode[ni.node.Name]
	if len(pods) == 0 && len(c.dra.onNode[ni.node.Name]) == 0 {
		return nil
	}
	// Devices held through ResourceClaims: by the pod that holds them,
	// and claims no pod here holds, which hold their devices all the same.
	byPod, orphans := c.claimShares(ni)
	h := newNodeHoldings(&ni.m, b.schedulerName, byPod, c.assumed)
	out := make([]model.Allocation, 0, len(pods)+len(orphans))
	for _, a := range orphanAllocations(ni.node.Name, orphans) {
		if !h.take(&a.Request, a.GPUs) {
			b.log.V(2).Info("allocated claim over-allocates its node; left out of the snapshot", "claim", a.Pod, "node", ni.node.Name)
			continue
		}
		out = append(out, a)
	}
	held, over := h.resolve(pods)
	for _, key := range over {
		b.log.V(2).Info("running pod over-allocates its node; left out of the snapshot", "pod", key, "node", ni.node.Name)
	}
	for _, e := range held {
		p := e.pi.pod
		nonPreemptible := p.Spec.SchedulerName != b.schedulerName || p.DeletionTimestamp != nil ||
			r.active(e.pi.key, p, now) || c.protectedByPDB(p)
		out = append(out, model.Allocation{
			Pod: e.pi.key, Group: e.pi.group, Queue: b.allocationQueue(c, e.pi), Priority: podPriority(p), Node: ni.node.Name,
			Request: e.req, GPUs: e.shares, StartedAt: p.CreationTimestamp.UnixMilli(), NonPreemptible: nonPreemptible,
		})
	}
	return out
}

// allocationQueue is the queue a placed pod's usage counts against: its
// group's, resolved as for pending pods; the default queue for another
// scheduler's lone pods.
func (b *builder) allocationQueue(c *clusterCache, pi *podInfo) string {
	if pi.pg != "" {
		// A member that names no queue itself counts in the queue its
		// group was admitted to, not in its namespace's default.
		if q, ok := b.groupQueues[pi.group]; ok {
			return q
		}
		pgQueue := ""
		if pg := c.podGroups[pi.pg]; pg != nil {
			pgQueue = pg.Spec.Queue
		}
		q, _ := groupQueue(c, pi, c.members[pi.group], pgQueue)
		b.groupQueues[pi.group] = q
		return q
	}
	if pi.pod.Spec.SchedulerName == b.schedulerName {
		return podQueue(c, pi, "")
	}
	return queue.DefaultQueue
}

// queues converts the Queue objects, parents first, adding each only if
// the hierarchy stays valid with it: a bad Queue is left out (with the
// reason in in.queueErrs) and blocks nothing but itself and its children.
func (b *builder) queues(c *clusterCache, in *cycleInput) []model.Queue {
	names := make([]string, 0, len(c.queues))
	for n := range c.queues {
		names = append(names, n)
	}
	slices.Sort(names)
	depth := func(n string) int {
		d := 0
		for seen := map[string]bool{}; n != "" && !seen[n] && c.queues[n] != nil; d++ {
			seen[n] = true
			n = c.queues[n].Spec.Parent
		}
		return d
	}
	// Parents first; among equals the older Queue first, so that the
	// newcomer that breaks the hierarchy is the one left out and the
	// queues already in use keep working.
	slices.SortStableFunc(names, func(x, y string) int {
		if d := cmp.Compare(depth(x), depth(y)); d != 0 {
			return d
		}
		return c.queues[x].CreationTimestamp.Compare(c.queues[y].CreationTimestamp.Time)
	})
	var out []model.Queue
	for _, n := range names {
		q, err := modelQueue(c.queues[n])
		if err != nil {
			in.queueErrs[n] = badInput("InvalidQueue", "%v", err)
			continue
		}
		if _, err := queue.New(append(slices.Clone(out), q)); err != nil {
			in.queueErrs[n] = badInput("InvalidQueue", "%v", err)
			continue
		}
		if ls := c.queues[n].Spec.NamespaceSelector; ls != nil {
			sel, err := metav1.LabelSelectorAsSelector(ls)
			if err != nil {
				in.queueErrs[n] = badInput("InvalidQueue", "spec.namespaceSelector: %v", err)
				continue
			}
			if in.admits == nil {
				in.admits = map[string]labels.Selector{}
			}
			in.admits[n] = sel
		}
		out = append(out, q)
	}
	return out
}

// modelQueue converts a Queue, refusing quantities out of bounds with the
// field named.
func modelQueue(q *v1alpha1.Queue) (model.Queue, error) {
	out := model.Queue{Name: q.Name, Parent: q.Spec.Parent, Priority: q.Spec.Priority,
		NoPreemption: q.Spec.Preemption == v1alpha1.PreemptNever, NoReclaim: q.Spec.Reclaim == v1alpha1.ReclaimNever}
	for i, r := range q.Spec.Resources {
		name := corev1.ResourceName(r.Name)
		limit, kept := resourceBounds[name]
		if !kept {
			continue
		}
		for _, f := range []struct {
			field string
			dst   *model.Resources
			v     *resource.Quantity
		}{{"guaranteed", &out.Guaranteed, r.Guaranteed}, {"limit", &out.Limit, r.Limit}} {
			if f.v == nil {
				continue
			}
			if err := checkQuantity(fmt.Sprintf("spec.resources[%d].%s", i, f.field), *f.v, limit); err != nil {
				return model.Queue{}, err
			}
			setResource(f.dst, name, *f.v)
		}
		// A resource not listed keeps the default weight, 1.
		switch w := float64(r.Weight); name {
		case corev1.ResourceCPU:
			out.Weights.MilliCPU = w
		case corev1.ResourceMemory:
			out.Weights.MemoryMiB = w
		case ResourceGPU:
			out.Weights.GPUMilli = w
		}
	}
	return out, nil
}
