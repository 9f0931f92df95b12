package adapter

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// diagnosis is a waiting group's explanation, kept between cycles so the
// per-node scan runs at a bounded rate.
type diagnosis struct {
	msg string
	at  time.Time
}

// report explains waiting pods and writes PodGroup and Queue status.
func (l *loop) report(in *cycleInput, d *model.Decisions, placed map[string]bool) {
	if l.diag == nil {
		l.diag = map[string]diagnosis{}
	}
	// 0. Nodes left out, or used without topology, for what they say;
	//    checkpoints and minimum runtimes refused.
	l.reportNodes()
	for _, x := range in.badCheckpoints {
		l.status.event(x.pod, corev1.EventTypeWarning, "InvalidCheckpoint", x.msg)
	}
	for _, x := range in.badClasses {
		l.status.event(x.pc, corev1.EventTypeWarning, "InvalidMinRuntime", x.msg)
	}
	// 1. Pods whose own spec cannot be scheduled.
	for _, pi := range in.badPods {
		l.status.podCondition(pi.pod, pi.bad.Reason, pi.bad.Msg)
	}
	// 2. Groups held back before the core, and groups it could not place.
	// reasons holds the PodGroup condition's reason where it is not
	// "Waiting".
	msgs, reasons := map[string]string{}, map[string]string{}
	for name, g := range in.groups {
		if g.held != nil && len(g.pending) > 0 && !placed[name] {
			msgs[name] = g.held.Msg
			for _, pi := range g.pending {
				l.status.podCondition(pi.pod, g.held.Reason, g.held.Msg)
			}
		}
	}
	pendingByName := map[string]*model.PodGroup{}
	for i := range in.snap.Pending {
		pendingByName[in.snap.Pending[i].Name] = &in.snap.Pending[i]
	}
	for _, u := range d.Unplaced {
		g := in.groups[u.Group]
		if g == nil || placed[u.Group] {
			continue
		}
		msg := ""
		switch u.Code {
		case model.UnplacedAboveQueueLimit, model.UnplacedAboveCapacity:
			// Waiting cannot help: the group, the queue or the cluster
			// must change, and the message says which field.
			msg, reasons[u.Group] = aboveLimitMessage(in, g, u), u.Code
		case model.UnplacedAboveNodeLimits:
			// Waiting cannot help until a node pool's limits change; no
			// node is bought for part of the gang meanwhile.
			msg, reasons[u.Group] = u.Reason+": raise the GPU node pools' spec.limits (nvidia.com/gpu) or lower the gang's minMember", u.Code
		case model.UnplacedNodesComing:
			// Nodes already bought will start it once their GPUs
			// register: the core names them.
			msg, reasons[u.Group] = u.Reason, u.Code
		case model.UnplacedPreemptionDisabled, model.UnplacedReclaimDisabled, model.UnplacedWaitingForVictims:
			// The core's own words: the queue's policy, or the pods
			// evicted for it, keep it waiting.
			msg = u.Reason
		case model.UnplacedNoDomain, model.UnplacedFragmentedDomain, model.UnplacedBadTopology:
			// The core's words name the level, the best domain and the
			// pods that would have to move, which node-by-node filter
			// counts cannot: a gang bound to one domain waits for the
			// domain, not for any node.
			msg, reasons[u.Group] = u.Reason, u.Code
		case model.UnplacedVictimsTooYoung:
			// It would preempt or reclaim but for the victims' minimum
			// runtime: it says until when, in the cluster's time.
			msg = fmt.Sprintf("%s (the first reaches it at %s)", u.Reason, time.UnixMilli(u.OfAge).UTC().Format(time.RFC3339))
			reasons[u.Group] = u.Code
		case model.UnplacedMissingMembers:
			msg, reasons[u.Group] = fmt.Sprintf("PodGroup %s needs minMember %d pods but has %d: lower spec.minMember or create the missing pods",
				g.pgKey, g.minMember, g.minMember-u.Missing), u.Code
		default:
			dg, ok := l.diag[u.Group]
			if u.Explained || u.Code == model.UnplacedQueueLimit || !ok {
				dg = diagnosis{msg: l.render(in, pendingByName[u.Group], u, g), at: in.startedAt}
				if u.Explained || u.Code == model.UnplacedQueueLimit {
					l.diag[u.Group] = dg
				}
			}
			msg = dg.msg
			if len(u.Kept) > 0 && (u.Explained || ok) {
				// The nodes kept free for it, in the core's words, as this
				// cycle chose them: after the node-by-node explanation,
				// which is kept between cycles, and never kept with it.
				// Unexplained and never explained, render gave the
				// core's words alone.
				msg += "; " + u.Reason
			}
			if u.Code == model.UnplacedQueueLimit {
				reasons[u.Group] = u.Code
			}
		}
		msgs[u.Group] = msg
		// Only a group that more nodes would start is Unschedulable, as
		// autoscalers read it; any other says what it waits for. A pod
		// still gated for capacity is released first (release) and says
		// so once the gate is gone, so that no autoscaler reads a gated
		// pod as unschedulable.
		reason := u.Code
		if u.Wait == model.WaitCapacity {
			reason = corev1.PodReasonUnschedulable
		}
		for _, pi := range g.pending {
			if reason == corev1.PodReasonUnschedulable && hasOurGate(pi.pod) {
				continue
			}
			l.status.podCondition(pi.pod, reason, msg)
		}
	}
	for name := range l.diag {
		if g := in.groups[name]; g == nil || len(g.pending) == 0 || placed[name] {
			delete(l.diag, name)
		}
	}
	// 3. PodGroup status.
	for name, g := range in.groups {
		if g.pg != nil {
			l.podGroupStatus(g, msgs[name], reasons[name], placed[name], in.startedAt)
		}
	}
	// 4. Queue status, at most once a second.
	if in.startedAt.Sub(l.queuesAt) >= time.Second {
		l.queuesAt = in.startedAt
		l.queueStatus(in, d)
	}
}

// askWhy marks, before the core runs, the pending groups whose reason
// the core should work out node by node this cycle (model.PodGroup.Explain):
// those never explained or last explained over ten seconds ago, at most
// DiagnoseLimit of them, so a large backlog costs a bounded look per cycle.
func (l *loop) askWhy(in *cycleInput) {
	budget := l.cfg.DiagnoseLimit
	for i := range in.snap.Pending {
		if budget == 0 {
			return
		}
		pg := &in.snap.Pending[i]
		if dg, ok := l.diag[pg.Name]; ok && in.startedAt.Sub(dg.at) <= 10*time.Second {
			continue
		}
		pg.Explain = true
		budget--
	}
}

// render says in words why a group waits, from the core's answer: "0/1000
// nodes available: 640 insufficient nvidia.com/gpu, 360 untolerated taint
// {k: v}", prefixed with "gang k/n placeable" for gangs. Nodes the core
// refused for the group's node class are broken down by the adapter's own
// predicates (taints, affinity, extended resources), which it worked out
// when it built the class.
func (l *loop) render(in *cycleInput, pg *model.PodGroup, u model.Unplaced, g *groupInfo) string {
	if pg == nil || len(pg.Pods) == 0 {
		return "waiting"
	}
	if u.Code == model.UnplacedQueueLimit {
		if msg := minResourcesAboveLimit(in, g, pg.MinResources); msg != "" {
			return msg
		}
		return fmt.Sprintf("queue %q is at its limit: wait for its workloads to finish or raise the queue's limit", g.queue)
	}
	if !u.Explained {
		return u.Reason
	}
	first := &pg.Pods[0]
	var cl *podClass
	if pi := g.pendingPod(first.Name); pi != nil {
		cl = cmp.Or(pi.volCls, pi.cls)
	}
	counts := map[string]int{}
	var order []string
	add := func(r string, n int) {
		if counts[r] == 0 {
			order = append(order, r)
		}
		counts[r] += n
	}
	refused := 0
	for _, f := range u.Filtered {
		refused += f.Nodes
		switch {
		case f.Filter == placement.FilterSelector && cl != nil && !cl.all:
			for _, w := range cl.why {
				add(w.reason, w.nodes)
			}
		case f.Filter == placement.FilterGPU:
			add("insufficient "+gpuResourceName(&first.Request), f.Nodes)
		case f.Filter == placement.FilterGPUKind:
			add(kindReason(&first.Request), f.Nodes)
		default:
			add(f.Filter, f.Nodes)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return counts[order[a]] > counts[order[b]] })
	msg := fmt.Sprintf("%d/%d nodes available", u.Nodes-refused, u.Nodes)
	if r := joinReasons(counts, order); r != "" {
		msg += ": " + r
	}
	if g.minMember > 1 || len(pg.Pods) > 1 {
		msg = fmt.Sprintf("gang %d/%d placeable (%d already bound); %s", u.Placeable+len(g.bound), g.minMember, len(g.bound), msg)
	}
	return msg
}

// minResourcesAboveLimit says so when a gang's spec.minResources alone
// exceed the limit of its queue or of one of the queue's parents: waiting
// cannot help, the spec or the queue must change.
func minResourcesAboveLimit(in *cycleInput, g *groupInfo, mr model.Resources) string {
	if g.pg == nil || mr == (model.Resources{}) {
		return ""
	}
	byName := map[string]model.Queue{}
	for _, q := range in.snap.Queues {
		byName[q.Name] = q
	}
	seen := map[string]bool{}
	for name := g.queue; name != "" && !seen[name]; name = byName[name].Parent {
		seen[name] = true
		lim := byName[name].Limit
		over := func(need, limit int64) bool { return limit > 0 && need > limit }
		if over(mr.MilliCPU, lim.MilliCPU) || over(mr.MemoryMiB, lim.MemoryMiB) || over(mr.GPUMilli, lim.GPUMilli) {
			return fmt.Sprintf("PodGroup %s asks for minResources %s, above queue %q's limit %s: lower spec.minResources or raise the queue's limit",
				g.pgKey, formatResources(mr), name, formatResources(lim))
		}
	}
	return ""
}

// aboveLimitMessage says why group g can never start as it is
// (model.UnplacedAboveQueueLimit or UnplacedAboveCapacity), naming the
// field to change: the PodGroup's spec.minResources or spec.minMember (and
// where a derived minMember came from), the queue's limit, the cluster's
// capacity.
func aboveLimitMessage(in *cycleInput, g *groupInfo, u model.Unplaced) string {
	what := "the pod"
	if g.pg != nil {
		what = fmt.Sprintf("PodGroup %s", g.pgKey)
		if from := g.pg.Annotations[v1alpha1.DerivedFromAnnotation]; from != "" {
			what += " (derived from " + from + ")"
		}
	}
	pods := len(g.pending)
	if u.Code == model.UnplacedAboveCapacity {
		if g.pg == nil {
			return fmt.Sprintf("the pod asks for %s, more than all the cluster's nodes have together (%s): lower its requests or add nodes",
				formatResources(u.Need), formatResources(u.Capacity))
		}
		return fmt.Sprintf("%s: spec.minMember %d needs at least %s for its pods, more than all the cluster's nodes have together (%s): it cannot start until nodes are added; lower spec.minMember or the pods' requests, or add nodes",
			what, g.minMember, formatResources(u.Need), formatResources(u.Capacity))
	}
	if g.pg != nil {
		if msg := minResourcesAboveLimit(in, g, g.minResources); msg != "" {
			return msg
		}
		return fmt.Sprintf("%s: spec.minMember %d: its %d pending pods need %s admitted, above queue %q's limit %s (spec.resources[].limit): it can never start in that queue; lower spec.minMember or the pods' requests, or raise the queue's limit",
			what, g.minMember, pods, formatResources(u.Need), u.Queue, formatResources(u.Limit))
	}
	return fmt.Sprintf("the pod asks for %s, above queue %q's limit %s (spec.resources[].limit): it can never start in that queue; lower its requests or raise the queue's limit",
		formatResources(u.Need), u.Queue, formatResources(u.Limit))
}

// formatResources prints the quota vector as a resource list would.
func formatResources(r model.Resources) string {
	var parts []string
	if r.MilliCPU > 0 {
		parts = append(parts, "cpu="+resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI).String())
	}
	if r.MemoryMiB > 0 {
		parts = append(parts, "memory="+resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI).String())
	}
	if r.GPUMilli > 0 {
		parts = append(parts, string(ResourceGPU)+"="+resource.NewMilliQuantity(r.GPUMilli, resource.DecimalSI).String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// kindReason says why no GPU of a node can take a share or a MIG instance.
func kindReason(r *model.Request) string {
	if r.MIGSlices > 0 {
		return "no GPU laid out for " + migResourcePrefix + r.MIGProfile
	}
	under := r.ShareResource
	if under == "" {
		under = string(ResourceGPUShared)
	}
	return "offer no GPU as shares under " + under + " (time-slicing or MPS) with the memory asked"
}

func gpuResourceName(r *model.Request) string {
	r = r.Alt(0) // claims with subrequests: their devices, as the first names them
	if res, ok := dra.ExtendedResource(r.DeviceSet); ok {
		return res
	}
	switch {
	case r.DeviceSet != "":
		return "free devices for the claims"
	case r.MIGSlices > 0:
		return migResourcePrefix + r.MIGProfile
	case r.Shared() && r.ShareResource != "":
		return r.ShareResource
	case r.Shared():
		return string(ResourceGPUShared)
	}
	return string(ResourceGPU)
}

// podGroupStatus writes phase, counts and the Schedulable condition;
// waitReason, when set, is the condition's reason for a group that waits.
func (l *loop) podGroupStatus(g *groupInfo, waitMsg, waitReason string, placed bool, now time.Time) {
	pg := g.pg
	st := v1alpha1.PodGroupStatus{Conditions: slices.Clone(pg.Status.Conditions), Placement: pg.Status.Placement}
	for _, pi := range g.bound {
		st.Scheduled++
		if pi.pod.Status.Phase == corev1.PodRunning {
			st.Running++
		}
	}
	for _, pi := range g.finished {
		if pi.pod.Status.Phase == corev1.PodSucceeded {
			st.Succeeded++
		} else {
			st.Failed++
		}
	}
	minMember := int32(g.minMember)
	cond := metav1.Condition{Type: v1alpha1.ConditionSchedulable, Status: metav1.ConditionTrue, Reason: "Placed", Message: "the gang is placed", ObservedGeneration: pg.Generation}
	switch {
	case st.Succeeded >= minMember && len(g.pending) == 0 && len(g.bound) == 0:
		st.Phase = v1alpha1.PodGroupSucceeded
	case st.Failed > 0 && st.Running+st.Succeeded < minMember && len(g.pending) == 0:
		st.Phase = v1alpha1.PodGroupFailed
	case st.Running >= minMember:
		st.Phase = v1alpha1.PodGroupRunning
	case st.Scheduled >= minMember || placed:
		st.Phase = v1alpha1.PodGroupScheduled
	default:
		st.Phase = v1alpha1.PodGroupPending
		if len(g.bound) == 0 {
			// Nothing of an earlier placement holds any more.
			st.Placement = nil
		}
		cond = metav1.Condition{Type: v1alpha1.ConditionSchedulable, Status: metav1.ConditionFalse, Reason: "Waiting", Message: waitMsg, ObservedGeneration: pg.Generation}
		switch {
		case g.held != nil:
			cond.Reason = g.held.Reason
		case waitReason != "":
			cond.Reason = waitReason
		}
		if cond.Message == "" {
			cond.Message = "waiting for a scheduling cycle"
		}
		if t := pg.Spec.ScheduleTimeoutSeconds; t != nil && now.Sub(pg.CreationTimestamp.Time) > time.Duration(*t)*time.Second {
			st.Phase = v1alpha1.PodGroupUnschedulable
		}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if equality.Semantic.DeepEqual(stripTimes(st.Conditions), stripTimes(pg.Status.Conditions)) &&
		st.Phase == pg.Status.Phase && st.Scheduled == pg.Status.Scheduled && st.Running == pg.Status.Running &&
		st.Succeeded == pg.Status.Succeeded && st.Failed == pg.Status.Failed && len(st.Placement) == len(pg.Status.Placement) {
		return
	}
	out := pg.DeepCopy()
	out.Status = st
	out.APIVersion, out.Kind = v1alpha1.SchemeGroupVersion.String(), "PodGroup"
	l.status.updateStatus("pg/"+g.pgKey, v1alpha1.PodGroupsResource, pg.Namespace, out)
}

func stripTimes(cs []metav1.Condition) []metav1.Condition {
	out := slices.Clone(cs)
	for i := range out {
		out[i].LastTransitionTime = metav1.Time{}
	}
	return out
}

// queueStatus computes usage and fair shares the way the core does and
// writes them with pending and admitted group counts and the Valid
// condition.
func (l *loop) queueStatus(in *cycleInput, d *model.Decisions) {
	core := make(map[string]*model.QueueStatus, len(d.Queues))
	for i := range d.Queues {
		core[d.Queues[i].Name] = &d.Queues[i]
	}
	pendingCount := map[string]int32{}
	admitted := map[string]int32{}
	for _, g := range in.groups {
		if len(g.pending) > 0 {
			pendingCount[g.queue]++
		} else if len(g.bound) > 0 {
			admitted[g.queue]++
		}
	}
	for a := range in.snap.AllRunning() {
		if strings.HasPrefix(a.Group, gpupod.LonePodGroupPrefix) && in.groups[a.Group] == nil {
			admitted[a.Queue]++
		}
	}
	l.metrics.queues(d.Queues, pendingCount)
	overTime := make(map[string]*model.QueueUsage, len(d.Usage))
	for i := range d.Usage {
		overTime[d.Usage[i].Queue] = &d.Usage[i]
	}
	for name, q := range in.queueObjs {
		st := v1alpha1.QueueStatus{Conditions: slices.Clone(q.Status.Conditions), Pending: pendingCount[name], Admitted: admitted[name],
			UsageOverTime: q.Status.UsageOverTime}
		cond := metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: "Valid", Message: "the queue is part of the hierarchy", ObservedGeneration: q.Generation}
		if e := in.queueErrs[name]; e != nil {
			cond = metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionFalse, Reason: e.Reason, Message: e.Msg + "; fix the queue's spec (its workloads wait until then)", ObservedGeneration: q.Generation}
		} else if cq := core[name]; cq != nil {
			st.Usage = resourceList(cq.Usage)
			st.FairShare = resourceList(cq.FairShare)
			st.UsageOverTime = keptUsage(q, overTime[name])
		}
		meta.SetStatusCondition(&st.Conditions, cond)
		if equality.Semantic.DeepEqual(stripTimes(st.Conditions), stripTimes(q.Status.Conditions)) && st.Pending == q.Status.Pending &&
			st.Admitted == q.Status.Admitted && equality.Semantic.DeepEqual(st.Usage, q.Status.Usage) && equality.Semantic.DeepEqual(st.FairShare, q.Status.FairShare) &&
			equality.Semantic.DeepEqual(st.UsageOverTime, q.Status.UsageOverTime) {
			continue
		}
		if e := in.queueErrs[name]; e != nil && !meta.IsStatusConditionFalse(q.Status.Conditions, v1alpha1.ConditionValid) {
			l.status.event(q, corev1.EventTypeWarning, e.Reason, e.Msg)
		}
		out := q.DeepCopy()
		out.Status = st
		out.APIVersion, out.Kind = v1alpha1.SchemeGroupVersion.String(), "Queue"
		l.status.updateStatus("queue/"+name, v1alpha1.QueuesResource, "", out)
	}
}

func resourceList(r model.Resources) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI),
		ResourceGPU:           *resource.NewMilliQuantity(r.GPUMilli, resource.DecimalSI),
	}
}
