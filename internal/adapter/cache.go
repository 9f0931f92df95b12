package adapter

import (
	"cmp"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

type nodeInfo struct {
	// node is the Node as the scheduler reads it: for a coming node, as
	// it will be once its GPUs register (coming.go); seen is the Node as
	// the informer gave it.
	node, seen *corev1.Node
	// base is the node as its own object describes it (convertNode); m
	// adds the GPUs its ResourceSlices publish (withDRA), and devs holds
	// their devices, aligned with m.GPUs.
	base model.Node
	m    model.Node
	devs []*draDevice
	// replicas is the node's shared-GPU sharing factor, 0 without shared
	// replicas.
	replicas int
	// disruptedBy names the taint or condition that marks the node about
	// to go away (disruption.go), "" for none.
	disruptedBy string
	// comingUntil is, for a coming node (coming.go), when it stops
	// counting as coming; zero for any other.
	comingUntil time.Time
}

type podInfo struct {
	pod   *corev1.Pod
	key   string // namespace/name
	req   model.Request
	bad   *BadInputError
	group string // the core's group name
	pg    string // the PodGroup's namespace/name, "" for a lone pod
	// groupFrom is the label or annotation that named pg.
	groupFrom v1alpha1.Key
	class     string // classKey of a pending pod of ours
	// awaiting: the pod waits for the group its workload makes (Grouping).
	awaiting bool
	// queue is the queue the pod's own labels or annotations name
	// (v1alpha1.PodQueueName), "" for none.
	queue v1alpha1.Named
	// extendedResource is the extended resource of a pending pod a DeviceClass may
	// serve through a claim made for it (claimableResource), "" for none.
	extendedResource corev1.ResourceName
	// spread is the node inclusion policy of each of req.Spread.
	spread []spreadInclusion
	// topo is the topology constraint the pod's annotations state
	// (v1alpha1.TopologyFromAnnotations), nil for none.
	topo *v1alpha1.TopologyConstraint

	// cls caches the pod's predicate class for the builder generation
	// clsGen; only the builder touches them, under the cache's lock.
	cls    *podClass
	clsGen int
	// volCls is the class its claims or volumes narrowed cls to in the
	// last snapshot, nil for none (pinnedClass, deviceNodesClass,
	// volumeClass): the report names its reasons.
	volCls *podClass
}

func (p *podInfo) bound() bool { return p.pod.Spec.NodeName != "" }

func (p *podInfo) terminal() bool {
	return p.pod.Status.Phase == corev1.PodSucceeded || p.pod.Status.Phase == corev1.PodFailed
}

// assumption is where one pod goes: the node and the GPU shares the core
// chose. A bindTask carries it to the API server, and the cache holds it
// while the bind is in flight and the informer has not shown it yet.
type assumption struct {
	node   string
	shares []model.GPUShare
}

// clusterCache is the informers' view, kept up to date by their event
// handlers: each object is converted once when it changes, and the pods are
// indexed by group and by node as they change, so that a cycle reads the
// pending groups and recomputes only the nodes whose pods changed: its cost
// follows the change and the pending work, not the size of the cluster.
type clusterCache struct {
	// schedulerName is the spec.schedulerName whose pending pods are ours.
	schedulerName string
	// grouping derives pod groups from workloads; nil when off. Set before
	// the informers start.
	grouping Grouping

	mu sync.Mutex
	// changed receives a token when anything the next cycle reads changes.
	changed chan struct{}

	nodes        map[string]*nodeInfo
	nodesVersion int // bumped when the node set or a node's model changes
	// replicas is the sharing factor pending shared requests are counted
	// in (updateReplicas).
	replicas int
	// badNodes are left out of scheduling for what they say (convertNode);
	// nodeWarnings are used without their topology.
	badNodes, nodeWarnings map[string]nodeProblem

	pods      map[string]*podInfo
	queues    map[string]*v1alpha1.Queue
	podGroups map[string]*v1alpha1.PodGroup
	nsQueue   map[string]string
	nsLabels  map[string]map[string]string
	classes   map[string]int32
	pdbs      map[string]*policyv1.PodDisruptionBudget
	// classMinRuntime is each PriorityClass's minimum runtime in
	// milliseconds (v1alpha1.MinRuntimeAnnotation), for the classes that
	// set a valid one; badClasses are the classes whose annotation was
	// refused since the last snapshot, to be reported.
	classMinRuntime map[string]int64
	badClasses      []badClass

	// nsSelectors lists the pods whose affinity selects namespaces by
	// label: they are converted again when a namespace's labels change.
	nsSelectors map[string]bool

	// assumed are the binds in flight (binder.bind): they hold their
	// nodes in every snapshot until the informer shows the pods bound.
	assumed map[string]assumption

	// members indexes the pods a cycle groups, by core group name: every
	// pod of a PodGroup (ours, or bound by anyone) and our lone pods that
	// are not placed yet.
	members map[string]map[string]*podInfo
	// onNode indexes the pods that hold a node's resources: bound and not
	// finished, or assumed there.
	onNode map[string]map[string]*podInfo
	// dirty lists the nodes whose allocations the next cycle recomputes;
	// allDirty all of them (a change every allocation may depend on).
	dirty    map[string]bool
	allDirty bool

	// dra holds ResourceSlices, DeviceClasses, ResourceClaims, the claim
	// allocations in flight and the refusals of the core's choices
	// (dra.State), read and written under mu.
	dra *dra.State
	// vol holds PVs, claims, storage classes and CSI attach limits.
	vol *volumeCache
	// topologies are the cluster's Topology objects (topology.go).
	topologies *topologyBook
	// disruption marks the nodes about to go away (disruption.go); set
	// before the informers start.
	disruption disruptionMarks
	// comingTimeout bounds how long a node counts as coming (coming.go);
	// clock tells the time it is measured by. Set before the informers
	// start.
	comingTimeout time.Duration
	clock         func() time.Time
	// coming holds, by name, when each coming node stops counting as
	// coming, so that a cycle looks at those nodes only.
	coming map[string]time.Time
	// pools are the GPU node pools of Karpenter, by name, with what each
	// may still add (nodepools.go); poolProblems what is unreadable in
	// a pool, by name.
	pools        map[string]poolRoom
	poolProblems map[string]string
}

func newClusterCache(schedulerName string) *clusterCache {
	c := &clusterCache{
		schedulerName: schedulerName,
		changed:       make(chan struct{}, 1),
		nodes:         map[string]*nodeInfo{}, replicas: 1, badNodes: map[string]nodeProblem{}, nodeWarnings: map[string]nodeProblem{},
		pods: map[string]*podInfo{}, queues: map[string]*v1alpha1.Queue{}, podGroups: map[string]*v1alpha1.PodGroup{},
		nsQueue: map[string]string{}, nsLabels: map[string]map[string]string{}, nsSelectors: map[string]bool{}, classes: map[string]int32{}, classMinRuntime: map[string]int64{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		assumed: map[string]assumption{},
		members: map[string]map[string]*podInfo{}, onNode: map[string]map[string]*podInfo{}, dirty: map[string]bool{},
		vol: newVolumeCache(), topologies: newTopologyBook(),
		disruption:    disruptionMarks{taints: DefaultDisruptionTaints},
		comingTimeout: DefaultComingNodeTimeout, clock: time.Now, poolProblems: map[string]string{}, coming: map[string]time.Time{},
	}
	c.dra = c.newDRAState()
	return c
}

func (c *clusterCache) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// handler adapts typed add/update/delete functions to an informer handler.
func handler[T any](upsert func(T), remove func(T)) cache.ResourceEventHandler {
	del := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if v, ok := obj.(T); ok {
			remove(v)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if v, ok := obj.(T); ok {
				upsert(v)
			}
		},
		UpdateFunc: func(_, obj any) {
			if v, ok := obj.(T); ok {
				upsert(v)
			}
		},
		DeleteFunc: del,
	}
}

func (c *clusterCache) upsertNode(n *corev1.Node) {
	seen := n
	up, comingUntil, expired, err := comingNode(n, c.comingTimeout, c.clock())
	if up != nil {
		n = up // read as it will be once its GPUs register
	}
	m, warn, cerr := convertNode(n)
	if err == nil {
		err = cerr
	}
	m.Coming = up != nil
	warnReason := ""
	if expired != "" && warn == "" {
		warn, warnReason = expired, ReasonGPUsNotRegistered
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// A node that states an impossible capacity is left out, as if
		// absent, until it is fixed; the loop reports it.
		c.badNodes[n.Name] = nodeProblem{node: n, msg: err.Error()}
		if c.nodes[n.Name] != nil {
			c.removeNode(n.Name)
		}
		return
	}
	delete(c.badNodes, n.Name)
	disruptedBy := c.disruption.disruptedBy(n)
	m.Disrupted = disruptedBy != ""
	base := m
	m, devs := c.withDRA(n, base)
	if len(devs) > 0 && base.Coming {
		// Its GPUs come through the ResourceSlices it has published: it
		// is up, and read as it is.
		n, comingUntil = seen, time.Time{}
		if base, warn, err = convertNode(n); err != nil {
			c.badNodes[n.Name] = nodeProblem{node: n, msg: err.Error()}
			if c.nodes[n.Name] != nil {
				c.removeNode(n.Name)
			}
			return
		}
		base.Disrupted = disruptedBy != ""
		m, devs = c.withDRA(n, base)
	}
	if m.Topology != nil && base.Topology == nil {
		// The topology describes the GPUs the node's slices publish.
		warn = ""
	}
	if warn != "" {
		c.nodeWarnings[n.Name] = nodeProblem{node: n, msg: warn, reason: warnReason}
	} else {
		delete(c.nodeWarnings, n.Name)
	}
	old := c.nodes[n.Name]
	if old == nil || !sameModelNode(&old.m, &m) || !slices.EqualFunc(old.node.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool {
		return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
	}) || !maps.Equal(old.node.Labels, n.Labels) {
		c.nodesVersion++
	}
	if old == nil || !sameModelNode(&old.m, &m) {
		c.dirty[n.Name] = true
	}
	base.Volumes, m.Volumes = c.vol.limits[n.Name], c.vol.limits[n.Name]
	ni := &nodeInfo{node: n, seen: seen, base: base, m: m, devs: devs, replicas: sharedReplicas(n), disruptedBy: disruptedBy, comingUntil: comingUntil}
	c.nodes[n.Name] = ni
	if comingUntil.IsZero() {
		delete(c.coming, n.Name)
	} else {
		c.coming[n.Name] = comingUntil
	}
	if old == nil || old.replicas != ni.replicas {
		c.updateReplicas()
	}
	c.poke()
}

// sharedReplicas is the sharing factor of a node's nvidia.com/gpu.shared
// replicas, labelled or derived as convertNode reads it (nodeDevices), 0
// when it offers none. convertNode has read the node without error.
func sharedReplicas(n *corev1.Node) int {
	d, err := nodeDevices(n)
	if err != nil || d.shared == 0 {
		return 0
	}
	return d.replicas
}

// updateReplicas sets the sharing factor pending pods' shared requests are
// converted with: the smallest among the nodes that offer shared replicas,
// so that a replica is never estimated smaller than on any node. The
// estimate is what quotas count before a GPU is chosen; the core sizes the
// share on each GPU by that GPU's own replicas (model.GPU.ShareMilli), so
// a node with more replicas takes as many pods as it has. Pods whose
// request depends on it are converted again when it changes. Caller holds
// mu.
func (c *clusterCache) updateReplicas() {
	r := 0
	for _, ni := range c.nodes {
		if ni.replicas > 0 && (r == 0 || ni.replicas < r) {
			r = ni.replicas
		}
	}
	r = max(r, 1)
	if r == c.replicas {
		return
	}
	c.replicas = r
	for _, pi := range c.pods {
		if !pi.bound() && usesShared(pi.pod) {
			c.upsertPodLocked(pi.pod)
		}
	}
}

// usesShared reports whether a pod asks for nvidia.com/gpu.shared.
func usesShared(p *corev1.Pod) bool {
	if _, ok := p.Spec.Overhead[ResourceGPUShared]; ok {
		return true // the cache keeps a pod's requests as its overhead (forCache)
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Requests[ResourceGPUShared]; ok {
				return true
			}
			if _, ok := cs[i].Resources.Limits[ResourceGPUShared]; ok {
				return true
			}
		}
	}
	return false
}

func sameModelNode(a, b *model.Node) bool {
	return a.MilliCPU == b.MilliCPU && a.MemoryMiB == b.MemoryMiB && a.Unschedulable == b.Unschedulable && a.Disrupted == b.Disrupted && a.Coming == b.Coming &&
		slices.Equal(a.GPUs, b.GPUs) && (a.Topology == nil) == (b.Topology == nil) && reflect.DeepEqual(a.MIG, b.MIG) &&
		(a.Allocatable == nil) == (b.Allocatable == nil) && maps.Equal(a.Allocatable, b.Allocatable)
}

func (c *clusterCache) deleteNode(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.badNodes, n.Name)
	delete(c.nodeWarnings, n.Name)
	c.removeNode(n.Name)
}

// removeNode forgets a node the scheduler may no longer use. Caller holds
// mu.
func (c *clusterCache) removeNode(name string) {
	old := c.nodes[name]
	delete(c.nodes, name)
	delete(c.coming, name)
	c.dirty[name] = true
	c.nodesVersion++
	if old != nil && old.replicas > 0 {
		c.updateReplicas()
	}
	c.poke()
}

// nodeProblem is something wrong with what a Node says, for the loop to
// report.
type nodeProblem struct {
	node *corev1.Node
	msg  string
	// reason is the warning's event reason; "" for
	// ReasonGPUTopologyIgnored.
	reason string
}

// problems returns the nodes left out for bad input and the ones whose
// topology was dropped, each sorted by name.
func (c *clusterCache) problems() (bad, warned []nodeProblem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.badNodes {
		bad = append(bad, p)
	}
	for _, p := range c.nodeWarnings {
		warned = append(warned, p)
	}
	byName := func(a, b nodeProblem) int { return strings.Compare(a.node.Name, b.node.Name) }
	slices.SortFunc(bad, byName)
	slices.SortFunc(warned, byName)
	return bad, warned
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// Grouping derives a pod's group from the workload that owns it
// (grouper.Grouper).
type Grouping interface {
	// Awaiting reports whether the pod waits for its derived group, and
	// with an error why that group cannot be made.
	Awaiting(p *corev1.Pod) (bool, error)
	// Forget drops a deleted pod from those waiting for their group.
	Forget(p *corev1.Pod)
}

// regroup asks again whether a pod waits for its derived group: the
// grouper settled it without changing the pod.
func (c *clusterCache) regroup(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pi := c.pods[namespace+"/"+name]; pi != nil {
		c.upsertPodLocked(pi.pod)
		c.poke()
	}
}

// membershipError is the reason a pod waits when its labels and
// annotations do not say plainly which group and queue it joins.
func membershipError(err error) *BadInputError {
	var conflict *v1alpha1.ConflictError
	if errors.As(err, &conflict) {
		if conflict.What == "queue" {
			return badInput("ConflictingQueues", "%v", err)
		}
		return badInput("ConflictingPodGroups", "%v", err)
	}
	return badInput("InvalidName", "%v", err)
}

// nodeOf is the node whose resources pi holds ("" for none): its own once
// bound (until it finishes), else the one a bind in flight names.
func (c *clusterCache) nodeOf(pi *podInfo) string {
	if pi.bound() {
		if pi.terminal() {
			return ""
		}
		return pi.pod.Spec.NodeName
	}
	if a, ok := c.assumed[pi.key]; ok {
		return a.node
	}
	return ""
}

// grouped reports whether a cycle groups pi: a PodGroup member that is ours
// or bound, or a lone pod of ours that is not placed yet.
func (c *clusterCache) grouped(pi *podInfo) bool {
	ours := pi.pod.Spec.SchedulerName == c.schedulerName
	if pi.pg != "" {
		return ours || pi.bound()
	}
	_, assumed := c.assumed[pi.key]
	return ours && !pi.bound() && !assumed && !pi.terminal()
}

// index adds pi to the group and node indexes, unindex takes it out; every
// change to a pod or its assumption goes unindex, change, index.
func (c *clusterCache) index(pi *podInfo) {
	if c.grouped(pi) {
		m := c.members[pi.group]
		if m == nil {
			m = map[string]*podInfo{}
			c.members[pi.group] = m
		}
		m[pi.key] = pi
	}
	if n := c.nodeOf(pi); n != "" {
		m := c.onNode[n]
		if m == nil {
			m = map[string]*podInfo{}
			c.onNode[n] = m
		}
		m[pi.key] = pi
		c.dirty[n] = true
	}
}

func (c *clusterCache) unindex(pi *podInfo) {
	if m := c.members[pi.group]; m != nil {
		delete(m, pi.key)
		if len(m) == 0 {
			delete(c.members, pi.group)
		}
	}
	if n := c.nodeOf(pi); n != "" {
		if m := c.onNode[n]; m != nil {
			delete(m, pi.key)
			if len(m) == 0 {
				delete(c.onNode, n)
			}
		}
		c.dirty[n] = true
	}
}

// allocationChanged reports whether a pod update changes what the pod holds
// or how the core may treat it (queue, group, preemptibility).
func allocationChanged(old, p *podInfo) bool {
	o, n := old.pod, p.pod
	a, b := &old.req, &p.req
	return o.UID != n.UID || o.Spec.SchedulerName != n.Spec.SchedulerName || o.Spec.NodeName != n.Spec.NodeName || old.terminal() != p.terminal() ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || !maps.Equal(o.Labels, n.Labels) ||
		o.Annotations[GPUsAnnotation] != n.Annotations[GPUsAnnotation] || o.Annotations[HeldAnnotation] != n.Annotations[HeldAnnotation] || (old.bad == nil) != (p.bad == nil) ||
		o.Annotations[v1alpha1.LastCheckpointAnnotation] != n.Annotations[v1alpha1.LastCheckpointAnnotation] ||
		old.queue != p.queue || old.pg != p.pg || old.awaiting != p.awaiting ||
		a.MilliCPU != b.MilliCPU || a.MemoryMiB != b.MemoryMiB || a.GPUs != b.GPUs || a.GPUMilli != b.GPUMilli || a.Replicas != b.Replicas ||
		a.GPUMemoryMiB != b.GPUMemoryMiB || a.MIGSlices != b.MIGSlices || a.MIGProfile != b.MIGProfile || a.ShareResource != b.ShareResource ||
		!maps.Equal(a.Scalars, b.Scalars) || !slices.Equal(a.HostPorts, b.HostPorts)
}

// replaceIndexed puts p where old is in the indexes, for an update that
// changes neither the pod's group nor what it holds.
func (c *clusterCache) replaceIndexed(old, p *podInfo) {
	if m := c.members[old.group]; m != nil && m[old.key] == old {
		m[p.key] = p
	}
	if n := c.nodeOf(old); n != "" {
		if m := c.onNode[n]; m != nil && m[old.key] == old {
			m[p.key] = p
		}
	}
}

func (c *clusterCache) upsertPod(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.upsertPodLocked(p)
}

// upsertPodLocked converts and indexes a pod. Caller holds mu.
func (c *clusterCache) upsertPodLocked(p *corev1.Pod) {
	key := podKey(p)
	pi := &podInfo{pod: p, key: key, group: gpupod.LonePodGroupPrefix + key}
	req, err := podRequest(p, c.replicas)
	var bad *BadInputError
	if errors.As(err, &bad) {
		pi.bad = bad
	}
	if p.Spec.NodeName == "" {
		pi.bad = cmp.Or(pi.bad, unsupported(p))
	}
	if spread, bad := podConstraints(p, c.nsLabels, &req); bad != nil {
		pi.bad = cmp.Or(pi.bad, bad)
		req.Affinity, req.Spread = nil, nil
	} else {
		pi.spread = spread
	}
	if usesNamespaceSelector(p) {
		c.nsSelectors[key] = true
	} else {
		delete(c.nsSelectors, key)
	}
	pi.req = req
	// A pod that names its group or queue in two dialects that disagree
	// waits until the user says which one they meant.
	g, gerr := v1alpha1.PodGroupName(p.Labels, p.Annotations)
	if g.Value != "" {
		pi.pg = p.Namespace + "/" + g.Value
		pi.group = "pg/" + pi.pg
		pi.groupFrom = g.From
	}
	q, qerr := v1alpha1.PodQueueName(p.Labels, p.Annotations)
	pi.queue = q
	if err := cmp.Or(gerr, qerr); err != nil && pi.bad == nil {
		pi.bad = membershipError(err)
	}
	// A placed pod's topology counts too: its gang's slices are named
	// by the same constraint for the pods that run as for those that wait.
	topo, err := v1alpha1.TopologyFromAnnotations(p.Annotations)
	if err != nil && pi.bad == nil && p.Spec.NodeName == "" {
		pi.bad = badInput("InvalidTopology", "%v", err)
	}
	pi.topo = topo
	// Volcano's annotation may name a Volcano PodGroup, which the grouping
	// mirrors into a PodGroup of gpuplane's of the same name: the pod waits
	// while the grouping looks it up, and then until this cache has the
	// mirror (upsertPodGroup asks again). A PodGroup of that name made by
	// hand does not end the wait: the grouping may yet find that it clashes
	// with a Volcano PodGroup.
	volcano := pi.groupFrom.Name == v1alpha1.VolcanoGroupAnnotation && pi.groupFrom.Annotation
	if c.grouping != nil && (pi.pg == "" || volcano) && pi.bad == nil {
		aw, err := c.grouping.Awaiting(p)
		if err != nil {
			pi.bad = badInput("GroupingFailed", "%v", err)
		}
		pi.awaiting = aw && err == nil
		if pi.awaiting && pi.pg != "" {
			if pg := c.podGroups[pi.pg]; pg != nil && pg.Labels[v1alpha1.DerivedLabel] == "true" {
				pi.awaiting = false
			}
		}
	}
	if p.Spec.NodeName == "" {
		pi.class = classKey(p)
		if pi.bad == nil {
			pi.extendedResource, pi.bad = claimableResource(p, &pi.req)
		}
	}
	old := c.pods[key]
	if old != nil && old.class == pi.class {
		pi.cls, pi.clsGen = old.cls, old.clsGen
	}
	if old != nil {
		c.unindexClaims(old)
	}
	c.indexClaims(pi)
	if old != nil && !allocationChanged(old, pi) {
		// A status-only update (a pod turning Running, its IP) leaves the
		// pod's group and its node's allocations as they were.
		c.replaceIndexed(old, pi)
		c.pods[key] = pi
	} else {
		if old != nil {
			c.unindex(old)
		}
		c.pods[key] = pi
		if p.Spec.NodeName != "" {
			delete(c.assumed, key)
		}
		c.index(pi)
	}
	// Status-only updates change nothing a cycle decides on; PodGroup
	// status catches up on the periodic cycle. Skipping them keeps
	// thousands of kubelet updates from each costing a cycle.
	if old == nil || old.pod.Spec.NodeName != p.Spec.NodeName || old.terminal() != pi.terminal() ||
		(old.pod.DeletionTimestamp == nil) != (p.DeletionTimestamp == nil) || !maps.Equal(old.pod.Labels, p.Labels) ||
		old.queue != pi.queue || old.pg != pi.pg || (old.bad == nil) != (pi.bad == nil) || old.awaiting != pi.awaiting ||
		(old.topo == nil) != (pi.topo == nil) || old.topo != nil && *old.topo != *pi.topo ||
		len(old.pod.Spec.SchedulingGates) != len(p.Spec.SchedulingGates) || len(old.pod.Status.ResourceClaimStatuses) != len(p.Status.ResourceClaimStatuses) {
		c.poke()
	}
}

func (c *clusterCache) deletePod(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(p)
	if old := c.pods[key]; old != nil {
		c.unindex(old)
		c.unindexClaims(old)
	}
	delete(c.pods, key)
	delete(c.assumed, key)
	delete(c.nsSelectors, key)
	if c.grouping != nil {
		c.grouping.Forget(p)
	}
	c.poke()
}

// assumeAll records binds in flight: the pods hold their nodes from now on.
func (c *clusterCache) assumeAll(tasks []bindTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range tasks {
		c.assume(podKey(t.pod), t.assumption)
	}
}

// assumption returns the bind in flight for a pod, if any.
func (c *clusterCache) assumption(pod string) (assumption, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.assumed[pod]
	return a, ok
}

// assume records one bind in flight. Caller holds mu.
func (c *clusterCache) assume(pod string, a assumption) {
	pi := c.pods[pod]
	if pi == nil {
		return
	}
	c.unindex(pi)
	c.assumed[pod] = a
	c.index(pi)
}

// forget drops the assumption of a bind that failed.
func (c *clusterCache) forget(pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pi := c.pods[pod]; pi != nil {
		c.unindex(pi)
		delete(c.assumed, pod)
		c.index(pi)
	} else {
		delete(c.assumed, pod)
	}
	c.poke()
}

// touch marks the node a pod holds for recomputing: something that changes
// how the next snapshot treats the pod (a refused eviction) changed.
func (c *clusterCache) touch(pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pi := c.pods[pod]; pi != nil {
		if n := c.nodeOf(pi); n != "" {
			c.dirty[n] = true
		}
	}
	c.poke()
}

// podsByKey returns the pods of the given keys (namespace/name), nil for
// those the cache does not hold.
func (c *clusterCache) podsByKey(keys []string) []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*corev1.Pod, len(keys))
	for i, k := range keys {
		if pi := c.pods[k]; pi != nil {
			out[i] = pi.pod
		}
	}
	return out
}

// changes receives a token when anything the next cycle reads changed.
func (c *clusterCache) changes() <-chan struct{} { return c.changed }

// snapshot builds the next cycle's input with b, under the cache's lock.
func (c *clusterCache) snapshot(b *builder, r *refusals, now time.Time) *cycleInput {
	c.expireComing(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	return b.build(c, r, now)
}

// expireComing reads again, as they are, the coming nodes (coming.go)
// whose time to register their GPUs is up at now.
func (c *clusterCache) expireComing(now time.Time) {
	var late []*corev1.Node
	c.mu.Lock()
	for name, until := range c.coming {
		if ni := c.nodes[name]; ni != nil && !now.Before(until) {
			late = append(late, ni.seen)
		}
	}
	c.mu.Unlock()
	for _, n := range late {
		c.upsertNode(n)
	}
}

// resumedGang is a gang whose committed placement a predecessor did not
// finish binding: the members still to bind, where the record puts them.
type resumedGang struct {
	group   string
	pg      *v1alpha1.PodGroup
	members []resumedMember
}

type resumedMember struct {
	pod *corev1.Pod
	assumption
}

// resumeCommitted finds the gangs whose PodGroup records a placement that
// some of its members, ours and still pending, have not been bound to, and
// assumes those members there. Only records that still hold (same pod
// UIDs, known nodes, readable GPUs) and make the gang whole again are
// resumed: one that cannot would leave it partly bound again.
func (c *clusterCache) resumeCommitted() []resumedGang {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []resumedGang
	for key, pg := range c.podGroups {
		group := "pg/" + key
		var members []resumedMember
		ok := true
		for _, m := range pg.Status.Placement {
			pi := c.pods[pg.Namespace+"/"+m.Pod]
			if pi == nil || string(pi.pod.UID) != m.UID || pi.pod.Spec.SchedulerName != c.schedulerName {
				continue // gone or recreated: the record does not hold for it
			}
			if pi.bound() || pi.terminal() || pi.pod.DeletionTimestamp != nil || pi.group != group {
				continue
			}
			n := c.nodes[m.Node]
			if n == nil {
				ok = false
				break
			}
			shares, err := parseShares(m.GPUs, &n.m)
			if err != nil {
				ok = false
				break
			}
			members = append(members, resumedMember{pod: pi.pod, assumption: assumption{node: m.Node, shares: shares}})
		}
		if !ok || len(members) == 0 {
			continue
		}
		placed := 0
		for _, pi := range c.members[group] {
			if pi.bound() {
				placed++
			}
		}
		if placed+len(members) < int(pg.Spec.MinMember) {
			continue
		}
		for _, m := range members {
			c.assume(podKey(m.pod), m.assumption)
		}
		out = append(out, resumedGang{group: group, pg: pg, members: members})
	}
	return out
}

// markMembers marks the nodes of a group's placed members dirty: their
// allocations name the group's queue.
func (c *clusterCache) markMembers(group string) {
	for _, pi := range c.members[group] {
		if n := c.nodeOf(pi); n != "" {
			c.dirty[n] = true
		}
	}
}

func (c *clusterCache) upsertQueue(q *v1alpha1.Queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.queues[q.Name]
	c.queues[q.Name] = q
	if old == nil || old.Generation != q.Generation {
		c.poke()
	}
}

func (c *clusterCache) deleteQueue(q *v1alpha1.Queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.queues, q.Name)
	c.poke()
}

func (c *clusterCache) upsertPodGroup(g *v1alpha1.PodGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := g.Namespace + "/" + g.Name
	old := c.podGroups[key]
	c.podGroups[key] = g
	if old == nil || old.Spec.Queue != g.Spec.Queue || !equality.Semantic.DeepEqual(old.Spec.Topology, g.Spec.Topology) {
		c.markMembers("pg/" + key)
	}
	if old == nil || old.Labels[v1alpha1.DerivedLabel] != g.Labels[v1alpha1.DerivedLabel] {
		// Pods that waited for this PodGroup to be mirrored (Volcano's)
		// go on.
		var waiting []*corev1.Pod
		for _, pi := range c.members["pg/"+key] {
			if pi.awaiting {
				waiting = append(waiting, pi.pod)
			}
		}
		for _, p := range waiting {
			c.upsertPodLocked(p)
		}
	}
	if old == nil || old.Generation != g.Generation {
		c.poke()
	}
}

func (c *clusterCache) deletePodGroup(g *v1alpha1.PodGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := g.Namespace + "/" + g.Name
	delete(c.podGroups, key)
	c.markMembers("pg/" + key)
	c.poke()
}

func (c *clusterCache) upsertNamespace(ns *corev1.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !maps.Equal(c.nsLabels[ns.Name], ns.Labels) {
		// Queues admit namespaces by their labels (spec.namespaceSelector):
		// the next cycle checks every group again.
		c.nsLabels[ns.Name] = ns.Labels
		c.reconvertNamespaceSelectors()
		c.poke()
	}
	q := ns.Annotations[v1alpha1.DefaultQueueAnnotation]
	if c.nsQueue[ns.Name] != q {
		c.nsQueue[ns.Name] = q
		// Allocations of the namespace's pods name the queue; namespaces
		// change rarely enough to recompute every node.
		c.allDirty = true
		c.poke()
	}
}

func (c *clusterCache) deleteNamespace(ns *corev1.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nsQueue, ns.Name)
	delete(c.nsLabels, ns.Name)
	c.reconvertNamespaceSelectors()
}

// reconvertNamespaceSelectors converts again the pods whose affinity
// terms select namespaces by label, after a namespace's labels changed.
// Caller holds mu.
func (c *clusterCache) reconvertNamespaceSelectors() {
	if len(c.nsSelectors) == 0 {
		return
	}
	for key := range c.nsSelectors {
		if pi := c.pods[key]; pi != nil {
			c.upsertPodLocked(pi.pod)
		}
	}
	c.allDirty = true
}

func (c *clusterCache) upsertPriorityClass(pc *schedulingv1.PriorityClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.classes[pc.Name] = pc.Value
	var ms int64
	if v, ok := pc.Annotations[v1alpha1.MinRuntimeAnnotation]; ok {
		d, err := v1alpha1.ParseMinRuntime(v)
		if err != nil {
			c.badClasses = append(c.badClasses, badClass{pc: pc, msg: err.Error() + "; the class has no minimum runtime until it is fixed"})
		}
		ms = d.Milliseconds()
	}
	c.setClassMinRuntime(pc.Name, ms)
}

func (c *clusterCache) deletePriorityClass(pc *schedulingv1.PriorityClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.classes, pc.Name)
	c.setClassMinRuntime(pc.Name, 0)
}

// badClass is a PriorityClass whose minimum runtime was refused, and why.
type badClass struct {
	pc  *schedulingv1.PriorityClass
	msg string
}

// setClassMinRuntime records class's minimum runtime (0: none); a change
// reaches every running pod's allocation and the pending groups.
func (c *clusterCache) setClassMinRuntime(class string, ms int64) {
	if c.classMinRuntime[class] == ms {
		return
	}
	if ms == 0 {
		delete(c.classMinRuntime, class)
	} else {
		c.classMinRuntime[class] = ms
	}
	c.allDirty = true
	c.poke()
}

func (c *clusterCache) upsertPDB(p *policyv1.PodDisruptionBudget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	old := c.pdbs[key]
	c.pdbs[key] = p
	if old == nil || blocks(old) != blocks(p) || !equalSelectors(old.Spec.Selector, p.Spec.Selector) {
		c.markCovered(old)
		c.markCovered(p)
	}
	c.poke()
}

func (c *clusterCache) deletePDB(p *policyv1.PodDisruptionBudget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pdbs, p.Namespace+"/"+p.Name)
	c.markCovered(p)
	c.poke()
}

// blocks reports whether a PodDisruptionBudget allows no disruption now.
func blocks(p *policyv1.PodDisruptionBudget) bool { return p.Status.DisruptionsAllowed <= 0 }

func equalSelectors(a, b *metav1.LabelSelector) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.MatchLabels, b.MatchLabels) && slices.EqualFunc(a.MatchExpressions, b.MatchExpressions,
		func(x, y metav1.LabelSelectorRequirement) bool {
			return x.Key == y.Key && x.Operator == y.Operator && slices.Equal(x.Values, y.Values)
		})
}

// markCovered marks dirty the nodes of the placed pods a budget selects:
// whether they may be offered as victims changed.
func (c *clusterCache) markCovered(p *policyv1.PodDisruptionBudget) {
	if p == nil {
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil {
		return
	}
	for n, pods := range c.onNode {
		for _, pi := range pods {
			if pi.pod.Namespace == p.Namespace && sel.Matches(labels.Set(pi.pod.Labels)) {
				c.dirty[n] = true
				break
			}
		}
	}
}

// protectedByPDB reports whether a PodDisruptionBudget covering the pod
// allows no disruption now; such pods are not offered to the core as
// victims (the Eviction API would refuse them anyway). Caller holds mu.
func (c *clusterCache) protectedByPDB(p *corev1.Pod) bool {
	for _, pdb := range c.pdbs {
		if pdb.Namespace != p.Namespace || !blocks(pdb) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			return true
		}
	}
	return false
}
