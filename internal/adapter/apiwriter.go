package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// apiWriter carries out the core's decisions: gang commits and binds on a
// pool of workers, evictions at a bounded rate, and the deletes that tear
// down partly bound gangs.
type apiWriter struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	// lanes are clients on connections of their own that carry only
	// bindings (Config.BindConnections, run.go); binds go round robin
	// over client and lanes.
	lanes    []kubernetes.Interface
	nextBind atomic.Uint32
	log      klog.Logger
	metrics  *metrics
	events   *statusWriter
	tasks    chan func(context.Context)
	evictRL  flowcontrol.RateLimiter
	wg       sync.WaitGroup
}

func newAPIWriter(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, cfg Config, log klog.Logger, m *metrics, events *statusWriter) *apiWriter {
	w := &apiWriter{client: client, dyn: dyn, log: log, metrics: m, events: events, tasks: make(chan func(context.Context), 4096),
		evictRL: flowcontrol.NewTokenBucketRateLimiter(cfg.EvictionQPS, max(1, int(cfg.EvictionQPS)))}
	for range cfg.BindWorkers {
		w.wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case t := <-w.tasks:
					t(ctx)
				}
			}
		})
	}
	return w
}

// wait blocks until the workers stopped (after their context ended).
func (w *apiWriter) wait() { w.wg.Wait() }

// submit queues a task for the workers; it blocks while the queue is full,
// which holds the cycle back when the API server falls behind.
func (w *apiWriter) submit(ctx context.Context, t func(context.Context)) bool {
	select {
	case w.tasks <- t:
		return true
	case <-ctx.Done():
		return false
	}
}

// bindTask is one pod's binding; done runs with its result on a worker.
type bindTask struct {
	pod *corev1.Pod
	// assumption is where the pod goes: the cache holds the same value
	// while the bind is in flight (clusterCache.assumeAll).
	assumption
	// alt is the alternative of the pod's claims' device set the core
	// chose (model.Bind.Alternative).
	alt int
	// queue is the Queue the pod's usage counts against, recorded on the
	// pod with the binding (gpupod.QueueAnnotation).
	queue string
	// keepNode marks the pod so that node autoscalers leave its node
	// alone (keepNode).
	keepNode bool
	// claims are the pod's ResourceClaim allocations and reservations,
	// written before the pod is bound and undone if the bind fails;
	// reserved says a gang's commit already wrote them.
	claims   []claimWrite
	reserved bool
	// volumes are the PV bindings and provisioning requests written
	// before the pod is bound, and awaitVolumes waits until their claims
	// are bound (volumes.go).
	volumes      []volumeWrite
	awaitVolumes func(context.Context) error
	// gated: the pod carries gpuplane's scheduling gate, lifted before
	// it is bound (the API server binds no gated pod).
	gated bool
	done  func(error)
}

// bind queues a binding.
func (w *apiWriter) bind(ctx context.Context, t bindTask) {
	if !w.submit(ctx, func(ctx context.Context) { t.done(w.doBind(ctx, t)) }) {
		t.done(ctx.Err())
	}
}

// bindGang commits a gang's placement to its PodGroup's status in one
// update and, once that succeeded, binds the members all at once. A gang
// therefore never has a member bound without its whole placement on
// record, and a scheduler that dies between the binds leaves its successor
// the placement to finish. committed runs with the commit's result before
// any bind is sent.
func (w *apiWriter) bindGang(ctx context.Context, pg *v1alpha1.PodGroup, placement []v1alpha1.MemberPlacement, members []bindTask, committed func(error)) {
	run := func(ctx context.Context) {
		// The gang's claims first, all or none: a member is never bound
		// without its devices, and no claim stays allocated for a gang
		// that is not bound.
		var claims []claimWrite
		for _, m := range members {
			claims = append(claims, m.claims...)
		}
		err := w.reserveClaims(ctx, claims)
		if err == nil {
			err = w.commit(ctx, pg, placement)
			if err != nil {
				w.releaseClaims(ctx, claims)
			}
		}
		committed(err)
		if err != nil {
			for _, m := range members {
				m.done(fmt.Errorf("committing the gang's placement: %w", err))
			}
			return
		}
		for i := range members {
			members[i].reserved = true
		}
		for _, m := range members {
			// The worker that committed must not wait on the queue it
			// drains: a member that finds the queue full is bound here.
			select {
			case w.tasks <- func(ctx context.Context) { m.done(w.doBind(ctx, m)) }:
			default:
				m.done(w.doBind(ctx, m))
			}
		}
	}
	if !w.submit(ctx, run) {
		committed(ctx.Err())
		for _, m := range members {
			m.done(ctx.Err())
		}
	}
}

// commit writes a gang's placement and the Scheduled phase to its PodGroup's
// status with a merge patch; the UID makes it fail for a PodGroup that was
// deleted and recreated meanwhile.
func (w *apiWriter) commit(ctx context.Context, pg *v1alpha1.PodGroup, placement []v1alpha1.MemberPlacement) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pg.UID},
		"status":   map[string]any{"phase": v1alpha1.PodGroupScheduled, "placement": placement},
	})
	if err != nil {
		return fmt.Errorf("encoding the placement of %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	start := time.Now()
	_, err = w.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(pg.Namespace).Patch(ctx, pg.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	w.metrics.commitDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		w.log.V(2).Info("committing a gang's placement failed", "podGroup", klog.KObj(pg), "err", err)
		return fmt.Errorf("writing the placement of %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return nil
}

func (w *apiWriter) doBind(ctx context.Context, t bindTask) error {
	if err := w.writeVolumes(ctx, t.volumes); err != nil {
		if len(t.claims) > 0 && t.reserved {
			w.releaseClaims(ctx, t.claims)
		}
		return err
	}
	if t.awaitVolumes != nil {
		if err := t.awaitVolumes(ctx); err != nil {
			if len(t.claims) > 0 && t.reserved {
				w.releaseClaims(ctx, t.claims)
			}
			return err
		}
	}
	if len(t.claims) > 0 && !t.reserved {
		if err := w.reserveClaims(ctx, t.claims); err != nil {
			return err
		}
	}
	err := w.ungateForBind(ctx, t)
	if err == nil {
		err = w.bindPod(ctx, t)
	}
	if err != nil && len(t.claims) > 0 {
		w.releaseClaims(ctx, t.claims)
	}
	return err
}

// ungateForBind lifts the pod's gate before its bind, when it has one.
func (w *apiWriter) ungateForBind(ctx context.Context, t bindTask) error {
	if !t.gated {
		return nil
	}
	if err := w.doUngate(ctx, t.pod); err != nil {
		return fmt.Errorf("lifting scheduling gate %s before binding: %w", v1alpha1.SchedulingGate, err)
	}
	return nil
}

// ungate lifts the pod's gate on a worker.
func (w *apiWriter) ungate(ctx context.Context, pod *corev1.Pod) {
	w.submit(ctx, func(ctx context.Context) {
		if err := w.doUngate(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			w.log.V(2).Info("lifting a scheduling gate failed; the next cycle retries", "pod", klog.KObj(pod), "err", err)
		}
	})
}

// doUngate removes gpuplane's scheduling gate from the pod, leaving any
// other; the UID makes it fail for a pod recreated under the same name.
func (w *apiWriter) doUngate(ctx context.Context, pod *corev1.Pod) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"uid":%q},%s`, pod.UID, ungatePatch[1:]))
	_, err := w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, ungatePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		w.log.V(4).Info("scheduling gate lifted", "pod", klog.KObj(pod))
	}
	return err
}

// bindPod binds one pod through the pods/binding subresource.
func (w *apiWriter) bindPod(ctx context.Context, t bindTask) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: t.pod.Namespace, Name: t.pod.Name, UID: t.pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: t.node},
	}
	// A pod's GPUs are recorded once: in its ResourceClaims' allocations
	// when it has claims, else in the annotation the device plugin
	// steers by.
	annotate := len(t.shares) > 0 && len(t.claims) == 0
	if annotate || t.queue != "" || t.keepNode {
		b.Annotations = make(map[string]string, 4)
	}
	if t.keepNode {
		b.Annotations[DoNotDisruptAnnotation] = "true"
		b.Annotations[SafeToEvictAnnotation] = "false"
	}
	if annotate {
		b.Annotations[GPUsAnnotation] = formatShares(t.shares)
	}
	if t.queue != "" {
		b.Annotations[gpupod.QueueAnnotation] = t.queue
	}
	start := time.Now()
	err := w.bindClient().CoreV1().Pods(t.pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	w.metrics.bindDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		w.metrics.binds.WithLabelValues("error").Inc()
		w.log.V(2).Info("bind failed", "pod", klog.KObj(t.pod), "node", t.node, "err", err)
		return err
	}
	w.metrics.binds.WithLabelValues("bound").Inc()
	w.metrics.e2e.Observe(time.Since(t.pod.CreationTimestamp.Time).Seconds())
	w.log.V(4).Info("bound", "pod", klog.KObj(t.pod), "node", t.node, "gpus", formatShares(t.shares))
	return nil
}

// bindClient is the client of the next binding: client and the lanes in
// turn, so that the binds in flight are spread over the connections.
func (w *apiWriter) bindClient() kubernetes.Interface {
	if len(w.lanes) == 0 {
		return w.client
	}
	i := int(w.nextBind.Add(1)) % (len(w.lanes) + 1)
	if i == len(w.lanes) {
		return w.client
	}
	return w.lanes[i]
}

// evict gives a victim notice n (its PreemptionNotice condition and
// event), then asks the Eviction API to remove it with n's grace period,
// at most EvictionQPS per second. done(true) means the API refused the
// notice or the eviction (a PodDisruptionBudget said no, 429) and the
// victim stays; a victim is never evicted without its notice.
func (w *apiWriter) evict(ctx context.Context, pod *corev1.Pod, n notice, forGroup, reason string, done func(refused bool)) {
	w.wg.Go(func() {
		if err := w.evictRL.Wait(ctx); err != nil {
			done(true)
			return
		}
		if err := giveNotice(ctx, w.client, w.events, pod, n); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				done(false) // gone, or replaced by a pod of the same name
				return
			}
			w.metrics.evictions.WithLabelValues(reason, "refused").Inc()
			w.log.V(2).Info("preemption notice refused; the victim stays", "pod", klog.KObj(pod), "for", forGroup, "err", err)
			done(true)
			return
		}
		// The request of Pods().EvictV1 with no retries: client-go would
		// otherwise wait out a PodDisruptionBudget's 429 (Retry-After) up
		// to ten times, holding the preemptor's room for minutes; a
		// refusal is the core's to weigh next cycle.
		err := w.client.CoreV1().RESTClient().Post().MaxRetries(0).Namespace(pod.Namespace).Resource("pods").Name(pod.Name).
			SubResource("eviction").Body(noticeEviction(pod, n)).Do(ctx).Error()
		switch {
		case err == nil:
			w.metrics.evictions.WithLabelValues(reason, "evicted").Inc()
			w.events.event(pod, corev1.EventTypeNormal, "Preempted", "evicted by gpuplane-scheduler ("+reason+") to make room for "+forGroup)
			done(false)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			done(false)
		default:
			// 429 from a PodDisruptionBudget, or any other refusal: the
			// victim stays.
			w.metrics.evictions.WithLabelValues(reason, "refused").Inc()
			w.log.V(2).Info("eviction refused", "pod", klog.KObj(pod), "for", forGroup, "err", err)
			done(true)
		}
	})
}

// deletePod removes a pod of a partly bound gang.
func (w *apiWriter) deletePod(ctx context.Context, pod *corev1.Pod, why string) {
	w.wg.Go(func() {
		err := w.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			w.log.Error(err, "deleting a pod of a partly bound gang", "pod", klog.KObj(pod))
			return
		}
		w.events.event(pod, corev1.EventTypeWarning, "GangIncomplete", why+"; the pod was deleted so that nothing stays half-placed")
	})
}
