package adapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// binder carries the core's decisions out through the clusterWriter:
// binds (a gang's placement recorded on its PodGroup before its members
// are bound) and evictions. It owns what it sent and has not seen come
// back: the holds of preemptors waiting for their victims (holdBook), the
// victims whose eviction the API refused (refusals), and the gangs a
// predecessor committed and did not finish binding (resuming). Binds in
// flight are the cache's assumptions (clusterCache.assume and forget):
// every snapshot must count them on their nodes until the informer shows
// the pods bound, and the cache is what builds snapshots.
//
// The loop calls it from its own goroutine; the clusterWriter's callbacks
// (a failed bind, a refused eviction) run on worker goroutines and reach
// only the cache, the holds and the refusals, each behind its own lock.
type binder struct {
	cfg     Config
	log     klog.Logger
	cache   *clusterCache
	api     clusterWriter
	status  statusSink
	metrics *metrics

	holds    holdBook
	refusals refusals
	// resuming holds the committed gangs' binds found when leading began
	// (resume), until the first snapshot shows they still fit.
	resuming map[string][]bindTask
}

func newBinder(cfg Config, log klog.Logger, c *clusterCache, api clusterWriter, st statusSink, m *metrics) *binder {
	return &binder{cfg: cfg, log: log, cache: c, api: api, status: st, metrics: m, refusals: *newRefusals()}
}

// maxPreemptionWait bounds how long a preemptor waits for its victims to
// exit before it competes afresh (model.Snapshot.HoldTimeout).
const maxPreemptionWait = time.Minute

// holdBook carries the core's holds (preemptors waiting for their
// victims) from one cycle's decisions to the next snapshot. The core
// decides them; the binder only drops one whose eviction the API
// refused, from the eviction's worker goroutine, hence the lock.
type holdBook struct {
	mu    sync.Mutex
	holds []model.Hold
}

// get returns the holds to pass to the next cycle.
func (h *holdBook) get() []model.Hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holds
}

// set keeps a cycle's holds.
func (h *holdBook) set(holds []model.Hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = holds
}

// refused ends the hold of group forGroup, for which the API refused to
// evict pod, and every hold that waits for pod: they compete afresh next
// cycle. A hold may wait for pods evicted for another group, in whose
// room it was placed.
func (h *holdBook) refused(pod, forGroup string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]model.Hold, 0, len(h.holds))
	for _, x := range h.holds {
		if x.Group != forGroup && !slices.Contains(x.Victims, pod) {
			out = append(out, x)
		}
	}
	h.holds = out
}

// refusals are the pods whose eviction the API refused (a
// PodDisruptionBudget said no), left alone until a time: snapshots mark
// them non-preemptible meanwhile. A refusal names the pod's UID, so a pod
// recreated under the same name starts with none.
type refusals struct {
	mu    sync.Mutex
	until map[string]refusal
}

func newRefusals() *refusals { return &refusals{until: map[string]refusal{}} }

type refusal struct {
	uid   types.UID
	until time.Time
}

// add refuses pod (namespace/name) with uid until a time.
func (r *refusals) add(pod string, uid types.UID, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.until[pod] = refusal{uid: uid, until: until}
}

// active reports whether p may not be evicted at now.
func (r *refusals) active(key string, p *corev1.Pod, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.until[key]
	return ok && x.uid == p.UID && x.until.After(now)
}

// expire forgets the refusals over at now and returns their pods.
func (r *refusals) expire(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for pod, x := range r.until {
		if !x.until.After(now) {
			delete(r.until, pod)
			out = append(out, pod)
		}
	}
	return out
}

// evict sends the cycle's evictions, each after its victim's notice
// (preemptionNotice) with the grace period of the victim's Queue. A
// refused one (a PodDisruptionBudget said no) leaves its victim alone for
// EvictionBackoff and ends the holds of the group it was for and of any
// other group waiting for it, which compete afresh.
func (b *binder) evict(ctx context.Context, in *cycleInput, d *model.Decisions) {
	if len(d.Evictions) == 0 {
		return
	}
	keys := make([]string, len(d.Evictions))
	for k, e := range d.Evictions {
		keys[k] = e.Pod
	}
	victims := b.cache.podsByKey(keys)
	queues := victimQueues(&in.snap, d.Evictions)
	for k, e := range d.Evictions {
		victim := victims[k]
		if victim == nil {
			continue
		}
		var grace *int64
		if q := in.queueObjs[queues[e.Pod]]; q != nil {
			grace = q.Spec.PreemptionGracePeriodSeconds
		}
		n := preemptionNotice(e.Reason, e.For, grace)
		if e.Reason == model.EvictDisruption {
			n = disruptionNotice(in, e, grace)
		}
		b.api.evict(ctx, victim, n, e.For, e.Reason, func(refused bool) {
			if refused {
				b.refusals.add(e.Pod, victim.UID, time.Now().Add(b.cfg.EvictionBackoff))
				b.cache.touch(e.Pod)
				// A moved group's own hold waits for its pods: it stays
				// where it runs.
				b.holds.refused(e.Pod, e.For)
			}
		})
	}
}

// victimQueues returns the queue each evicted pod counts in, read from
// the snapshot's allocations on the victims' nodes only.
func victimQueues(snap *model.Snapshot, evictions []model.Eviction) map[string]string {
	nodes := map[string]bool{}
	out := make(map[string]string, len(evictions))
	for _, e := range evictions {
		nodes[e.Node], out[e.Pod] = true, ""
	}
	for i := range snap.Nodes {
		if !nodes[snap.Nodes[i].Name] || i >= len(snap.RunningByNode) {
			continue
		}
		for _, a := range snap.RunningByNode[i] {
			if _, ok := out[a.Pod]; ok {
				out[a.Pod] = a.Queue
			}
		}
	}
	return out
}

// bind sends the cycle's binds and returns the groups it placed. The members of a PodGroup are bound only after the
// gang's whole placement is committed to the PodGroup's status.
func (b *binder) bind(ctx context.Context, in *cycleInput, binds []model.Bind) map[string]bool {
	placed := map[string]bool{}
	byGroup := map[string][]bindTask{}
	var order []string
	for _, x := range binds {
		g := in.groups[x.Group]
		if g == nil {
			continue
		}
		pi := g.pendingPod(x.Pod)
		if pi == nil {
			continue
		}
		if !placed[x.Group] {
			placed[x.Group] = true
			order = append(order, x.Group)
		}
		t := b.bindTask(pi.pod, x.Node, x.GPUs)
		t.queue, t.alt, t.keepNode = g.queue, x.Alternative, keepNode(g, x.GPUs)
		byGroup[x.Group] = append(byGroup[x.Group], t)
	}
	if len(order) == 0 {
		return placed
	}
	// Claims: each group's pods get their devices from the structured
	// allocator, on the core's choice; a group whose claims do not all
	// allocate is not bound this cycle.
	order = b.allocateClaims(ctx, in, order, byGroup, placed)
	order = b.prepareVolumes(in, binds, order, byGroup, placed)
	placements := map[string][]v1alpha1.MemberPlacement{}
	for _, name := range order {
		b.cache.assumeAll(byGroup[name])
		if g := in.groups[name]; g.pg != nil {
			placements[name] = b.placementOf(g, byGroup[name])
		}
	}
	for _, name := range order {
		g := in.groups[name]
		if g.pg == nil {
			for _, t := range byGroup[name] {
				b.api.bind(ctx, t)
			}
			continue
		}
		pg := g.pg
		b.api.bindGang(ctx, pg, placements[name], byGroup[name], func(err error) {
			if err != nil {
				b.status.event(pg, corev1.EventTypeWarning, "FailedCommit", fmt.Sprintf("recording the gang's placement before binding it: %v; the gang is retried whole", err))
			}
		})
	}
	return placed
}

// Annotations that keep a node autoscaler from draining a pod's node on
// its own initiative (api/gpupod).
const (
	DoNotDisruptAnnotation = gpupod.DoNotDisruptAnnotation
	SafeToEvictAnnotation  = gpupod.SafeToEvictAnnotation
)

// keepNode reports whether a pod bound with shares, a member of g, must
// keep its node against an autoscaler's voluntary disruption (it is bound
// with DoNotDisruptAnnotation and SafeToEvictAnnotation): a member of
// a gang (evicting one member stops the whole gang's work), or a pod that
// holds part of a GPU (its neighbours on that GPU would be moved with it
// or stranded). A pod alone on whole GPUs or on a MIG instance may move:
// it starts again elsewhere on its own.
func keepNode(g *groupInfo, shares []model.GPUShare) bool {
	if g.pgKey != "" && (g.minMember > 1 || len(g.pending)+len(g.bound)+len(g.finished) > 1) {
		return true
	}
	for _, s := range shares {
		// A whole GPU's share is its capacity (with all its memory); a
		// part of one, of its compute or only of its memory, is less.
		if s.MIGSlices == 0 && s.Milli < model.MilliPerGPU {
			return true
		}
	}
	return false
}

// bindTask is a bind whose failure drops the assumption and the claim
// allocations in flight (the pod is offered again next cycle) and says
// why on the pod.
func (b *binder) bindTask(pod *corev1.Pod, node string, gpus []model.GPUShare) bindTask {
	return bindTask{pod: pod, assumption: assumption{node: node, shares: gpus}, gated: hasOurGate(pod), done: b.bindDone(pod, node, nil)}
}

func (b *binder) bindDone(pod *corev1.Pod, node string, claims []claimWrite) func(error) {
	return func(err error) {
		if err != nil {
			b.cache.forgetClaims(podKey(pod), claims)
			b.cache.forget(podKey(pod))
			b.status.event(pod, corev1.EventTypeWarning, "FailedBinding", fmt.Sprintf("binding to %s: %v", node, err))
		}
	}
}

// allocateClaims allocates the claims of the pods of each group in order
// (allocateClaims of the cache) on exactly the core's choice, and returns
// the groups whose pods all got theirs; for the others it forgets what it
// allocated and says why on the pod that failed. A pod keeps the shares
// the core chose: the allocation lies within them. Claims that refuse the
// choice are counted (gpuplane_scheduler_claim_choice_refusals_total) and
// go back to the core in the next snapshot.
func (b *binder) allocateClaims(ctx context.Context, in *cycleInput, order []string, byGroup map[string][]bindTask, placed map[string]bool) []string {
	if len(in.claims) == 0 {
		return order
	}
	out := order[:0]
	for _, name := range order {
		tasks := byGroup[name]
		ok := true
		for i := range tasks {
			t := &tasks[i]
			pc := in.claims[podKey(t.pod)]
			if pc == nil {
				continue
			}
			// Extended resources the chosen node's device plugin serves
			// need no claim: no writes.
			writes, err := b.cache.allocateClaims(ctx, t.node, t.shares, t.alt, t.pod, pc)
			if refused := (*choiceRefusedError)(nil); errors.As(err, &refused) {
				b.metrics.refusedChoices.WithLabelValues(refused.Constraint()).Inc()
			}
			if err != nil {
				for _, done := range tasks[:i] {
					b.cache.forgetClaims(podKey(done.pod), done.claims)
				}
				b.status.event(t.pod, corev1.EventTypeWarning, "FailedClaimAllocation", err.Error())
				b.status.podCondition(t.pod, "ClaimAllocationFailed", err.Error())
				ok = false
				break
			}
			t.claims = writes
			t.done = b.bindDone(t.pod, t.node, writes)
		}
		if ok {
			out = append(out, name)
		} else {
			delete(placed, name)
		}
	}
	return out
}

// placementOf is a gang's placement once the new binds land: its members
// already bound (or being bound) where they are, and the new ones.
func (b *binder) placementOf(g *groupInfo, binds []bindTask) []v1alpha1.MemberPlacement {
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
		if a, ok := b.cache.assumption(pi.key); ok && m.Node == "" {
			m.Node, m.GPUs = a.node, formatShares(a.shares)
		}
		out = append(out, m)
	}
	for _, t := range binds {
		out = append(out, v1alpha1.MemberPlacement{Pod: t.pod.Name, UID: string(t.pod.UID), Node: t.node, GPUs: formatShares(t.shares)})
	}
	slices.SortFunc(out, func(a, b v1alpha1.MemberPlacement) int { return cmp.Compare(a.Pod, b.Pod) })
	return slices.CompactFunc(out, func(a, b v1alpha1.MemberPlacement) bool { return a.Pod == b.Pod })
}

// resume runs once when the scheduler starts leading: a predecessor that
// died between committing a gang's placement and binding all of it leaves
// members unbound that the record places. The cache assumes them where the
// record puts them (clusterCache.resumeCommitted), so that no other group
// takes their GPUs, and finishResumed binds them once the first snapshot
// shows that they still fit.
func (b *binder) resume() {
	b.resuming = map[string][]bindTask{}
	for _, g := range b.cache.resumeCommitted() {
		tasks := make([]bindTask, len(g.members))
		for i, m := range g.members {
			tasks[i] = b.bindTask(m.pod, m.node, m.shares)
			// A committed placement is a gang's.
			tasks[i].keepNode = true
		}
		b.resuming[g.group] = tasks
		b.log.Info("resuming the binds of a committed gang", "podGroup", klog.KRef(g.pg.Namespace, g.pg.Name), "unbound", len(tasks))
	}
}

// finishResumed binds the resumed members of each gang whose every one of
// them made it into the snapshot's allocations (none over-allocates its
// node now); the other gangs' assumptions are dropped and the core places
// them afresh.
func (b *binder) finishResumed(ctx context.Context, in *cycleInput) {
	if len(b.resuming) == 0 {
		return
	}
	running := map[string]string{}
	for a := range in.snap.AllRunning() {
		running[a.Pod] = a.Node
	}
	for group, tasks := range b.resuming {
		fits := true
		for _, t := range tasks {
			if running[podKey(t.pod)] != t.node {
				fits = false
			}
		}
		if !fits {
			b.log.Info("a committed gang no longer fits where it was placed; placing it afresh", "group", group)
			for _, t := range tasks {
				b.cache.forget(podKey(t.pod))
			}
			continue
		}
		queue := ""
		if g := in.groups[group]; g != nil {
			queue = g.queue
		}
		for _, t := range tasks {
			t.queue = queue
			b.api.bind(ctx, t)
		}
	}
	b.resuming = nil
}
