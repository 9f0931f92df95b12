package adapter

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

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
	// topoAsked: a member not finished states a topology in its
	// annotations (groupTopology).
	topoAsked bool
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
	b.movableQueues = map[string]bool{}
	for _, n := range names {
		q, err := modelQueue(c.queues[n])
		if err == nil {
			err = b.queueMovable(c.queues[n])
		}
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
	if err := q.Spec.CheckPreemptionSettings(); err != nil {
		return model.Queue{}, err
	}
	if d := q.Spec.UsageHalfLife; d != nil {
		out.UsageHalfLife = d.Milliseconds()
	}
	if d := q.Spec.MinRuntime; d != nil {
		out.MinRuntime = d.Milliseconds()
	}
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
