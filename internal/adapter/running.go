package adapter

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// runningAllocations returns each node's allocations, aligned with
// b.nodes, recomputing only the nodes the cache marked dirty (and those
// whose refusals expired). An unchanged node's chunk is the very slice of
// the last snapshot, which tells the core to skip it. Caller holds c.mu.
func (b *builder) runningAllocations(c *clusterCache, r *refusals, now time.Time) [][]model.Allocation {
	if b.groupQueues == nil {
		b.groupQueues, b.groupSliceSizes, b.groupMovables = map[string]string{}, map[string]int{}, map[string]bool{}
	}
	clear(b.groupQueues)
	clear(b.groupSliceSizes)
	clear(b.groupMovables)
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
	// The list in node order is kept from cycle to cycle and changed
	// where nodes are dirty, so that a cycle in which a few pods changed
	// costs no look-up per node; a new node list rebuilds it.
	rebuild := b.running == nil || b.runningFor != b.nodesVersion
	for n := range c.dirty {
		if ni := c.nodes[n]; ni != nil {
			a := b.nodeAllocations(c, r, ni, now)
			b.nodeAllocs[n] = a
			if i, ok := b.nodeIndex[n]; ok && !rebuild {
				b.running[i] = a
			}
		} else {
			delete(b.nodeAllocs, n)
		}
	}
	clear(c.dirty)
	if rebuild {
		b.running = make([][]model.Allocation, len(b.nodes))
		b.nodeIndex = make(map[string]int, len(b.nodes))
		for i, n := range b.nodes {
			b.running[i] = b.nodeAllocs[n.node.Name]
			b.nodeIndex[n.node.Name] = i
		}
		b.runningFor = b.nodesVersion
	}
	// The snapshot gets a copy: it outlives the next cycle's changes.
	return slices.Clone(b.running)
}

// nodeAllocations lists the allocations of the pods holding one node,
// with the GPU shares nodeHoldings resolves for each; a pod that would
// over-allocate the node is left out with a log line (the core refuses
// over-allocated snapshots). Caller holds c.mu.
func (b *builder) nodeAllocations(c *clusterCache, r *refusals, ni *nodeInfo, now time.Time) []model.Allocation {
	pods := c.onNode[ni.node.Name]
	if len(pods) == 0 && c.dra.ClaimsOn(ni.node.Name) == 0 && len(c.vol.attached[ni.node.Name]) == 0 {
		return nil
	}
	// Devices held through ResourceClaims: by the pod that holds them,
	// and claims no pod here holds, which hold their devices all the same.
	byPod, orphans := c.claimShares(ni)
	h := newNodeHoldings(&ni.m, b.schedulerName, byPod, c.assumed)
	out := make([]model.Allocation, 0, len(pods)+len(orphans))
	for _, a := range dra.OrphanAllocations(ni.node.Name, orphans) {
		if !h.take(&a.Request, a.GPUs) {
			b.log.V(2).Info("allocated claim over-allocates its node; left out of the snapshot", "claim", a.Pod, "node", ni.node.Name)
			continue
		}
		out = append(out, a)
	}
	held, over := h.resolve(pods)
	var byPods map[model.Attachment]bool
	for _, key := range over {
		b.log.V(2).Info("running pod over-allocates its node; left out of the snapshot", "pod", key, "node", ni.node.Name)
	}
	for _, e := range held {
		p := e.pi.pod
		nonPreemptible := p.Spec.SchedulerName != b.schedulerName || p.DeletionTimestamp != nil ||
			r.active(e.pi.key, p, now) || c.protectedByPDB(p)
		req := e.req
		b.readRequestDomains(&req)
		req.Volumes = c.placedVolumes(e.pi, &ni.m)
		req.Terminating = p.DeletionTimestamp != nil
		q := b.allocationQueue(c, e.pi)
		a := model.Allocation{
			Pod: e.pi.key, Group: e.pi.group, Queue: q, Priority: podPriority(p), Node: ni.node.Name,
			Request: req, GPUs: e.shares, StartedAt: p.CreationTimestamp.UnixMilli(), NonPreemptible: nonPreemptible,
			MinRuntime: c.classMinRuntime[p.Spec.PriorityClassName], LastCheckpoint: b.lastCheckpoint(p, now),
			MinMember: runningMinMember(c, e.pi), Movable: b.runningMovable(c, e.pi, q),
		}
		if e.pi.pg != "" {
			// A gang's member: its slice, which the rest of the slice
			// joins.
			a.Slice = b.allocationSlice(c, e.pi)
		}
		out = append(out, a)
		if req.Volumes != nil {
			if byPods == nil {
				byPods = map[model.Attachment]bool{}
			}
			for _, x := range req.Volumes.Attach {
				byPods[x] = true
			}
		}
	}
	if a, ok := c.attachmentsAllocation(&ni.m, byPods); ok {
		// Takes nothing the holdings count: only attach slots, which the
		// core counts.
		out = append(out, a)
	}
	return out
}

// allocationSlice names the slice a placed member of a gang is in, as for
// its pending peers (sliceName), by the slice size its group's topology
// states.
func (b *builder) allocationSlice(c *clusterCache, pi *podInfo) string {
	size, ok := b.groupSliceSizes[pi.group]
	if !ok {
		if tc, _, _ := groupConstraint(&groupInfo{name: pi.group, pgKey: pi.pg, pg: c.podGroups[pi.pg]}, c.members[pi.group]); tc != nil {
			size = int(tc.SliceSize)
		}
		b.groupSliceSizes[pi.group] = size
	}
	return sliceName(pi.pod, size)
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

// lastCheckpoint reads a running pod's v1alpha1.LastCheckpointAnnotation
// in milliseconds, 0 when it has none. The value is the workload's word,
// untrusted: one that does not parse, or lies in the future, counts as no
// checkpoint and is reported on the pod (InvalidCheckpoint) once per node
// change that reads it.
func (b *builder) lastCheckpoint(p *corev1.Pod, now time.Time) int64 {
	v, ok := p.Annotations[v1alpha1.LastCheckpointAnnotation]
	if !ok {
		return 0
	}
	t, err := v1alpha1.ParseLastCheckpoint(v, now)
	if err != nil {
		b.badCheckpoints = append(b.badCheckpoints, badCheckpoint{pod: p, msg: err.Error() + "; the pod counts as never having checkpointed"})
		return 0
	}
	return t.UnixMilli()
}

// badCheckpoint is a pod whose checkpoint annotation was refused, and why.
type badCheckpoint struct {
	pod *corev1.Pod
	msg string
}
