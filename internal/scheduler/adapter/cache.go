package adapter

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

type nodeInfo struct {
	node *corev1.Node
	m    model.Node
	warn string
}

type podInfo struct {
	pod   *corev1.Pod
	key   string // namespace/name
	req   model.Request
	bad   *BadInputError
	group string // the core's group name
	pg    string // the PodGroup's namespace/name, "" for a lone pod
	class string // classKey of a pending pod of ours
}

func (p *podInfo) bound() bool { return p.pod.Spec.NodeName != "" }

func (p *podInfo) terminal() bool {
	return p.pod.Status.Phase == corev1.PodSucceeded || p.pod.Status.Phase == corev1.PodFailed
}

// assumption is a bind the scheduler sent (or is sending) that the
// informer has not shown yet.
type assumption struct {
	node   string
	shares []model.GPUShare
}

// clusterCache is the informers' view, kept up to date by their event
// handlers: each object is converted once when it changes, so building a
// snapshot costs a pass over converted entries, not a conversion of the
// cluster.
type clusterCache struct {
	mu sync.Mutex
	// changed receives a token when anything the next cycle reads changes.
	changed chan struct{}

	nodes        map[string]*nodeInfo
	nodesVersion int // bumped when the node set or a node's model changes
	replicas     int // nvidia.com/gpu.shared replicas seen on nodes

	pods      map[string]*podInfo
	queues    map[string]*v1alpha1.Queue
	podGroups map[string]*v1alpha1.PodGroup
	nsQueue   map[string]string
	classes   map[string]int32
	pdbs      map[string]*policyv1.PodDisruptionBudget

	assumed map[string]assumption
	// refused holds pods whose eviction was refused, until when.
	refused map[string]time.Time
	// waiting maps a preemptor group to the victims it waits for and when
	// it started waiting.
	waiting map[string]*victimWait
}

type victimWait struct {
	victims []string
	since   time.Time
}

func newClusterCache() *clusterCache {
	return &clusterCache{
		changed: make(chan struct{}, 1),
		nodes:   map[string]*nodeInfo{}, replicas: 1,
		pods: map[string]*podInfo{}, queues: map[string]*v1alpha1.Queue{}, podGroups: map[string]*v1alpha1.PodGroup{},
		nsQueue: map[string]string{}, classes: map[string]int32{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		assumed: map[string]assumption{}, refused: map[string]time.Time{}, waiting: map[string]*victimWait{},
	}
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
	m, warn := convertNode(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.nodes[n.Name]
	if old == nil || !sameModelNode(&old.m, &m) || !slices.EqualFunc(old.node.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool {
		return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
	}) || !maps2Equal(old.node.Labels, n.Labels) {
		c.nodesVersion++
	}
	c.nodes[n.Name] = &nodeInfo{node: n, m: m, warn: warn}
	if r, err := strconv.Atoi(n.Labels[LabelGPUReplicas]); err == nil && r > c.replicas {
		c.replicas = r
	}
	c.poke()
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sameModelNode(a, b *model.Node) bool {
	return a.MilliCPU == b.MilliCPU && a.MemoryMiB == b.MemoryMiB && a.Unschedulable == b.Unschedulable &&
		slices.Equal(a.GPUs, b.GPUs) && (a.Topology == nil) == (b.Topology == nil)
}

func (c *clusterCache) deleteNode(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, n.Name)
	c.nodesVersion++
	c.poke()
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// podGroupOf returns the name of the PodGroup a pod joins ("" for none).
func podGroupOf(p *corev1.Pod) string {
	if g := p.Labels[v1alpha1.PodGroupLabel]; g != "" {
		return g
	}
	return p.Labels[v1alpha1.SchedulerPluginsPodGroupLabel]
}

func (c *clusterCache) upsertPod(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(p)
	pi := &podInfo{pod: p, key: key, group: "pod/" + key}
	if g := podGroupOf(p); g != "" {
		pi.pg = p.Namespace + "/" + g
		pi.group = "pg/" + pi.pg
	}
	req, err := podRequest(p, c.replicas)
	var bad *BadInputError
	if errors.As(err, &bad) {
		pi.bad = bad
	}
	pi.req = req
	if p.Spec.NodeName == "" {
		pi.class = classKey(p)
	}
	old := c.pods[key]
	c.pods[key] = pi
	if p.Spec.NodeName != "" {
		delete(c.assumed, key)
	}
	// Status-only updates (a pod turning Running, its IP) change nothing
	// a cycle decides on; PodGroup status catches up on the periodic
	// cycle. Skipping them keeps thousands of kubelet updates from each
	// costing a cycle.
	if old == nil || old.pod.Spec.NodeName != p.Spec.NodeName || old.terminal() != pi.terminal() ||
		(old.pod.DeletionTimestamp == nil) != (p.DeletionTimestamp == nil) || !maps2Equal(old.pod.Labels, p.Labels) ||
		len(old.pod.Spec.SchedulingGates) != len(p.Spec.SchedulingGates) {
		c.poke()
	}
}

func (c *clusterCache) deletePod(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := podKey(p)
	delete(c.pods, key)
	delete(c.assumed, key)
	delete(c.refused, key)
	c.poke()
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
	if old == nil || old.Generation != g.Generation {
		c.poke()
	}
}

func (c *clusterCache) deletePodGroup(g *v1alpha1.PodGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.podGroups, g.Namespace+"/"+g.Name)
	c.poke()
}

func (c *clusterCache) upsertNamespace(ns *corev1.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := ns.Annotations[v1alpha1.DefaultQueueAnnotation]
	if c.nsQueue[ns.Name] != q {
		c.nsQueue[ns.Name] = q
		c.poke()
	}
}

func (c *clusterCache) deleteNamespace(ns *corev1.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nsQueue, ns.Name)
}

func (c *clusterCache) upsertPriorityClass(pc *schedulingv1.PriorityClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.classes[pc.Name] = pc.Value
}

func (c *clusterCache) deletePriorityClass(pc *schedulingv1.PriorityClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.classes, pc.Name)
}

func (c *clusterCache) upsertPDB(p *policyv1.PodDisruptionBudget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pdbs[p.Namespace+"/"+p.Name] = p
	c.poke()
}

func (c *clusterCache) deletePDB(p *policyv1.PodDisruptionBudget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pdbs, p.Namespace+"/"+p.Name)
	c.poke()
}

// protectedByPDB reports whether a PodDisruptionBudget covering the pod
// allows no disruption now; such pods are not offered to the core as
// victims (the Eviction API would refuse them anyway). Caller holds mu.
func (c *clusterCache) protectedByPDB(p *corev1.Pod) bool {
	for _, pdb := range c.pdbs {
		if pdb.Namespace != p.Namespace || pdb.Status.DisruptionsAllowed > 0 {
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

// forget drops the assumption of a bind that failed.
func (c *clusterCache) forget(pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.assumed, pod)
	c.poke()
}

func (c *clusterCache) refuse(pod string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused[pod] = until
	c.poke()
}
