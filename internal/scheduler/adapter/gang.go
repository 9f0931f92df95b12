package adapter

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// bind sends the cycle's binds and returns the groups it placed. The members of a PodGroup are bound only after the
// gang's whole placement is committed to the PodGroup's status.
func (l *loop) bind(ctx context.Context, in *cycleInput, binds []model.Bind) map[string]bool {
	placed := map[string]bool{}
	byGroup := map[string][]bindTask{}
	var order []string
	for _, b := range binds {
		g := in.groups[b.Group]
		if g == nil {
			continue
		}
		pi := g.pendingPod(b.Pod)
		if pi == nil {
			continue
		}
		if !placed[b.Group] {
			placed[b.Group] = true
			order = append(order, b.Group)
		}
		byGroup[b.Group] = append(byGroup[b.Group], l.bindTask(pi.pod, b.Node, b.GPUs))
	}
	if len(order) == 0 {
		return placed
	}
	placements := map[string][]v1alpha1.MemberPlacement{}
	l.cache.mu.Lock()
	for _, name := range order {
		for _, t := range byGroup[name] {
			l.cache.assume(podKey(t.pod), assumption{node: t.node, shares: t.gpus})
		}
		if g := in.groups[name]; g.pg != nil {
			placements[name] = l.placementOf(g, byGroup[name])
		}
	}
	l.cache.mu.Unlock()
	for _, name := range order {
		g := in.groups[name]
		if g.pg == nil {
			for _, t := range byGroup[name] {
				l.api.bind(ctx, t)
			}
			continue
		}
		pg := g.pg
		l.api.bindGang(ctx, pg, placements[name], byGroup[name], func(err error) {
			if err != nil {
				l.status.event(pg, corev1.EventTypeWarning, "FailedCommit", fmt.Sprintf("recording the gang's placement before binding it: %v; the gang is retried whole", err))
			}
		})
	}
	return placed
}

// bindTask is a bind whose failure drops the assumption (the pod is
// offered again next cycle) and says why on the pod.
func (l *loop) bindTask(pod *corev1.Pod, node string, gpus []model.GPUShare) bindTask {
	return bindTask{pod: pod, node: node, gpus: gpus, done: func(err error) {
		if err != nil {
			l.cache.forget(podKey(pod))
			l.status.event(pod, corev1.EventTypeWarning, "FailedBinding", fmt.Sprintf("binding to %s: %v", node, err))
		}
	}}
}

// placementOf is a gang's placement once the new binds land: its members
// already bound (or being bound) where they are, and the new ones. Caller
// holds the cache lock.
func (l *loop) placementOf(g *groupInfo, binds []bindTask) []v1alpha1.MemberPlacement {
	recorded := map[string]v1alpha1.MemberPlacement{}
	for _, m := range g.pg.Status.Placement {
		recorded[m.Pod] = m
	}
	out := make([]v1alpha1.MemberPlacement, 0, len(g.bound)+len(binds))
	for _, pi := range g.bound {
		p := pi.pod
		if m, ok := recorded[p.Name]; ok && m.UID == string(p.UID) {
			out = append(out, m)
			continue
		}
		m := v1alpha1.MemberPlacement{Pod: p.Name, UID: string(p.UID), Node: p.Spec.NodeName, GPUs: p.Annotations[GPUsAnnotation]}
		if a, ok := l.cache.assumed[pi.key]; ok && m.Node == "" {
			m.Node, m.GPUs = a.node, formatShares(a.shares)
		}
		out = append(out, m)
	}
	for _, t := range binds {
		out = append(out, v1alpha1.MemberPlacement{Pod: t.pod.Name, UID: string(t.pod.UID), Node: t.node, GPUs: formatShares(t.gpus)})
	}
	slices.SortFunc(out, func(a, b v1alpha1.MemberPlacement) int { return cmp.Compare(a.Pod, b.Pod) })
	return slices.CompactFunc(out, func(a, b v1alpha1.MemberPlacement) bool { return a.Pod == b.Pod })
}

// resumeCommitted runs once when the scheduler starts leading: a
// predecessor that died between committing a gang's placement and binding
// all of it leaves members unbound that the record places. They are
// assumed where the record puts them, so that no other group takes their
// GPUs, and bound by finishResumed once the first snapshot shows that
// they still fit. Caller holds the cache lock.
func (l *loop) resumeCommitted() {
	c := l.cache
	l.resuming = map[string][]bindTask{}
	for key, pg := range c.podGroups {
		group := "pg/" + key
		var tasks []bindTask
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
			tasks = append(tasks, l.bindTask(pi.pod, m.Node, shares))
		}
		if !ok || len(tasks) == 0 {
			continue
		}
		// Resume only what makes the gang whole: a record that cannot
		// (members deleted since) would leave it partly bound again.
		placed := 0
		for _, pi := range c.members[group] {
			if pi.bound() {
				placed++
			}
		}
		if placed+len(tasks) < int(pg.Spec.MinMember) {
			continue
		}
		for _, t := range tasks {
			c.assume(podKey(t.pod), assumption{node: t.node, shares: t.gpus})
		}
		l.resuming[group] = tasks
		l.log.Info("resuming the binds of a committed gang", "podGroup", klog.KRef(pg.Namespace, pg.Name), "unbound", len(tasks))
	}
}

// finishResumed binds the resumed members of each gang whose every one of
// them made it into the snapshot's allocations (none over-allocates its
// node now); the other gangs' assumptions are dropped and the core places
// them afresh.
func (l *loop) finishResumed(ctx context.Context, in *cycleInput) {
	if len(l.resuming) == 0 {
		return
	}
	running := map[string]string{}
	for a := range in.snap.AllRunning() {
		running[a.Pod] = a.Node
	}
	for group, tasks := range l.resuming {
		fits := true
		for _, t := range tasks {
			if running[podKey(t.pod)] != t.node {
				fits = false
			}
		}
		if !fits {
			l.log.Info("a committed gang no longer fits where it was placed; placing it afresh", "group", group)
			for _, t := range tasks {
				l.cache.forget(podKey(t.pod))
			}
			continue
		}
		for _, t := range tasks {
			l.api.bind(ctx, t)
		}
	}
	l.resuming = nil
}
