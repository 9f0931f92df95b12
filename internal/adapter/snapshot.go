package adapter

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corehelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

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
	// volumes are the pending pods' volumes, by pod key (volumes.go).
	volumes map[string]*podVolumes
	// badCheckpoints and badClasses are the refused checkpoint
	// annotations of running pods and minimum runtimes of PriorityClasses
	// this snapshot read, to be reported.
	badCheckpoints []badCheckpoint
	badClasses     []badClass
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
	// poolNodes stand for the future nodes of each readable node pool,
	// with the labels they will carry: a class that admits every node
	// but not every pool's still selects its nodes, so that the core
	// tells which pools' limits count for its pods (model.NodePool).
	poolNodes []*corev1.Node
	// classIDs numbers the classes (their node label, classLabelPrefix);
	// a class in use when the nodes change keeps its number, so that a
	// node's class labels change only where its membership did.
	classIDs map[string]int
	// domainKeys are the node label keys that some pod's affinity or
	// spread terms, or some gang's topology, have read as topology keys
	// since the builder started; only those reach the core, in
	// model.Node.Domains (domains.go).
	domainKeys map[string]bool
	// domains is each node's Domains as last passed, by node name.
	domains map[string]nodeDomains
	// domainKeysN is how many domainKeys the last node list was built
	// with.
	domainKeysN int

	// groupQueues and groupSliceSizes memoize, within one
	// runningAllocations, each PodGroup's queue (allocationQueue) and the
	// slice size its topology states (allocationSlice).
	groupQueues     map[string]string
	groupSliceSizes map[string]int
	// movableQueues are the Queues that opted their workloads in to moves,
	// and groupMovables each placed group's opt-in, memoized like
	// groupQueues (defrag.go).
	movableQueues map[string]bool
	groupMovables map[string]bool

	// nodeAllocs holds each node's allocations; a node's slice is
	// replaced, never changed, when its pods change (the core relies on
	// it: model.Snapshot.RunningByNode).
	nodeAllocs map[string][]model.Allocation
	// running is nodeAllocs in the order of nodes, as of nodes version
	// runningFor; nodeIndex is each node's place in nodes.
	running    [][]model.Allocation
	runningFor int
	nodeIndex  map[string]int

	// dra is the DRA memo: the device sets of pending pods' claims.
	dra draMemo
	// volClasses counts the volume classes among classes.
	volClasses int
	// badCheckpoints collects, while allocations are built, the pods
	// whose checkpoint annotation was refused (lastCheckpoint).
	badCheckpoints []badCheckpoint
}

func newBuilder(schedulerName string, budget int, log klog.Logger) *builder {
	return &builder{schedulerName: schedulerName, budget: budget, log: log, nodesVersion: -1, classes: map[string]*podClass{},
		classIDs: map[string]int{}, domainKeys: map[string]bool{}, domains: map[string]nodeDomains{},
		nodeAllocs: map[string][]model.Allocation{}}
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
		b.poolNodes = b.poolNodes[:0]
		for _, r := range c.pools {
			if !r.unreadable {
				b.poolNodes = append(b.poolNodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: r.labels}})
			}
		}
		b.classes = map[string]*podClass{}
		b.classGen++
		// Numbers of the classes the last snapshot used are kept.
		maps.DeleteFunc(b.classIDs, func(k string, _ int) bool { _, used := slices.BinarySearch(b.classKeys, k); return !used })
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
			if pi.topo != nil && !pi.terminal() {
				g.topoAsked = true
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
			case foreignGated(p):
				// Gated by another controller: not ready to be scheduled;
				// the API server already says so on the pod
				// (SchedulingGated). Only gpuplane's own gate
				// (v1alpha1.SchedulingGate) is ours to lift, and a pod
				// that carries it alone is pending like any other: it
				// counts in its gang, and the core says whether it waits
				// for capacity (release lifts the gate) or for anything
				// else (the gate stays).
			case pi.bad != nil:
				in.badPods = append(in.badPods, pi)
			default:
				g.pending = append(g.pending, pi)
			}
		}
	}

	// 2. Running allocations, recomputed for the nodes whose pods changed.
	in.snap.RunningByNode = b.runningAllocations(c, r, now)
	in.badCheckpoints, b.badCheckpoints = b.badCheckpoints, nil
	in.badClasses, c.badClasses = c.badClasses, nil

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
		// A pod that names no volume, no claim and no resource a
		// DeviceClass maps (the plain pod) skips both look-ups.
		for _, pi := range g.pending {
			if len(pi.pod.Spec.Volumes) > 0 {
				vols, bad := c.podVolumes(pi, b.nodes)
				if bad != nil {
					g.held = badInput(bad.Reason, "pod %s: %s", pi.key, bad.Msg)
					break
				}
				if vols != nil {
					if in.volumes == nil {
						in.volumes = map[string]*podVolumes{}
					}
					in.volumes[pi.key] = vols
				}
			}
			if !c.mayClaim(pi) {
				continue
			}
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
		// Only a gang whose PodGroup or some member asks for a topology
		// has one to resolve.
		var topo *model.GangTopology
		if g.topoAsked || g.pg != nil && !g.pg.Spec.Topology.IsZero() {
			var bad *BadInputError
			if topo, bad = c.groupTopology(g, c.members[name]); bad != nil {
				g.held = bad
				continue
			}
		}
		// What the gang still needs is the core's one rule (PodGroup.Min):
		// its size less the members bound or finished; a gang with fewer
		// pods than that waits in the core (model.UnplacedMissingMembers).
		movable, bad := b.groupMovable(g.pg, c.members[name], g.queue)
		if bad != nil {
			g.held = bad
			continue
		}
		// A gang placed by its topology is not moved: the core places a
		// moved group again without one (defrag.go).
		pg := model.PodGroup{Name: name, Queue: g.queue, MinMember: max(1, g.minMember), Placed: len(g.bound) + len(g.finished), CreatedAt: 0, Topology: topo, Movable: movable && topo == nil}
		if topo != nil {
			b.readDomains(topo.Levels...)
		}
		if len(g.pending) > 1 {
			if topo != nil && topo.SliceSize > 0 {
				// Slices of a size are taken in this order: by sub-group
				// and rank, so that a slice holds consecutive ranks.
				slices.SortFunc(g.pending, func(x, y *podInfo) int {
					return cmp.Or(strings.Compare(podSlice(x.pod), podSlice(y.pod)), cmp.Compare(podRank(x.pod), podRank(y.pod)), cmp.Compare(x.key, y.key))
				})
			} else {
				slices.SortFunc(g.pending, func(x, y *podInfo) int { return cmp.Compare(x.key, y.key) })
			}
		}
		pg.Pods = make([]model.Pod, 0, len(g.pending))
		for i, pi := range g.pending {
			cl := b.class(pi, used)
			req := pi.req
			var alts []*deviceSet
			b.readRequestDomains(&req)
			if pc := in.claims[pi.key]; pc != nil {
				if pc.Set != nil && pc.Set.AdminNodes != nil {
					// Admin access takes no GPU: the core chooses among
					// the nodes that have the devices.
					cl = b.deviceNodesClass(pi, cl, pc.Set.AdminNodes, used)
				} else if pc.Set != nil && len(pc.Set.FirstOf) > 0 {
					// Subrequests: one whole request per alternative,
					// in the allocator's order, made once the rest of
					// the request is (below).
					alts = pc.Set.FirstOf
					for _, alt := range alts {
						sets[alt.Name] = alt
					}
				} else if pc.Set != nil {
					req = withDeviceSet(req, pc.Set)
					sets[pc.Set.Name] = pc.Set
				}
				if pc.ERClaim != nil && pc.Set == nil {
					// Its claim is allocated already: the devices are the
					// claim's, the pod only joins it on its node.
					req.GPUs = 0
				}
				if pc.Node != "" {
					cl = b.pinnedClass(pi, cl, pc.Node, used)
				}
			}
			pi.volCls = nil
			if cl != pi.cls {
				pi.volCls = cl // narrowed by its claims: the report says why
			}
			if vols := in.volumes[pi.key]; vols != nil {
				req.Volumes = vols.need
				if vols.key != "" {
					cl = b.volumeClass(pi, cl, vols, used)
					pi.volCls = cl
				}
			}
			if !cl.all {
				req.NodeSelector = map[string]string{classLabelPrefix + strconv.Itoa(cl.id): "true"}
			}
			if len(req.Spread) > 0 {
				req.Spread = slices.Clone(req.Spread)
				for k := range req.Spread {
					req.Spread[k].Nodes = b.inclusionClass(pi, pi.spread[k], used)
				}
			}
			if len(alts) > 0 {
				// Each alternative is the whole request (its node
				// selector, volumes and spread included) but for its
				// GPUs.
				req.FirstOf = make([]model.Request, len(alts))
				for k, alt := range alts {
					req.FirstOf[k] = withDeviceSet(req, alt)
					req.FirstOf[k].FirstOf = nil
				}
			}
			mp := model.Pod{Name: pi.key, Request: req}
			if topo != nil && topo.SliceRequired != "" {
				mp.Slice = sliceName(pi.pod, topo.SliceSize)
			}
			pg.Pods = append(pg.Pods, mp)
			created := pi.pod.CreationTimestamp.UnixMilli()
			if i == 0 || created < pg.CreatedAt {
				pg.CreatedAt = created
			}
			pg.Priority = max(pg.Priority, podPriority(pi.pod))
			pg.MinRuntime = max(pg.MinRuntime, c.classMinRuntime[pi.pod.Spec.PriorityClassName])
			if pp := pi.pod.Spec.PreemptionPolicy; pp != nil && *pp == corev1.PreemptNever {
				pg.NeverEvicts = true
			}
		}
		if g.pg != nil {
			if v, ok := c.classes[g.pg.Spec.PriorityClassName]; ok {
				pg.Priority = max(pg.Priority, v)
			}
			pg.MinRuntime = max(pg.MinRuntime, c.classMinRuntime[g.pg.Spec.PriorityClassName])
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

// withDeviceSet is req asking for its GPUs through the claims whose
// devices set is: one MIG instance, a share of one GPU, all of the set's
// GPUs on a node, or a count of them.
func withDeviceSet(req model.Request, set *deviceSet) model.Request {
	req.DeviceSet = set.Name
	switch {
	case set.MIGSlices > 0:
		req.MIGSlices, req.MIGProfile = set.MIGSlices, set.MIGProfile
	case set.Share:
		req.GPUMilli, req.GPUMemoryMiB = set.ShareMilli, set.ShareMemMiB
	case set.All:
		req.GPUs, req.AllOfSet = max(set.Count, 1), true
	default:
		req.GPUs = set.Count
	}
	return req
}
