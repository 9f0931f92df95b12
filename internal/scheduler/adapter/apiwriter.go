package adapter

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

// apiWriter carries out the core's decisions: binds on a pool of workers,
// evictions at a bounded rate, and the deletes that tear down partly bound
// gangs.
type apiWriter struct {
	client  kubernetes.Interface
	log     klog.Logger
	metrics *metrics
	events  *statusWriter
	binds   chan bindTask
	evictRL flowcontrol.RateLimiter
	wg      sync.WaitGroup
}

type bindTask struct {
	pod    *corev1.Pod
	node   string
	shares string
	done   func(error)
}

func newAPIWriter(ctx context.Context, client kubernetes.Interface, cfg Config, log klog.Logger, m *metrics, events *statusWriter) *apiWriter {
	w := &apiWriter{client: client, log: log, metrics: m, events: events, binds: make(chan bindTask, 4096),
		evictRL: flowcontrol.NewTokenBucketRateLimiter(cfg.EvictionQPS, max(1, int(cfg.EvictionQPS)))}
	for range cfg.BindWorkers {
		w.wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case t := <-w.binds:
					t.done(w.doBind(ctx, t))
				}
			}
		})
	}
	return w
}

// wait blocks until the workers stopped (after their context ended).
func (w *apiWriter) wait() { w.wg.Wait() }

// bind queues a binding; done runs with its result on a worker.
func (w *apiWriter) bind(ctx context.Context, pod *corev1.Pod, node, shares string, done func(error)) {
	select {
	case w.binds <- bindTask{pod: pod, node: node, shares: shares, done: done}:
	case <-ctx.Done():
		done(ctx.Err())
	}
}

func (w *apiWriter) doBind(ctx context.Context, t bindTask) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: t.pod.Namespace, Name: t.pod.Name, UID: t.pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: t.node},
	}
	if t.shares != "" {
		b.Annotations = map[string]string{GPUsAnnotation: t.shares}
	}
	start := time.Now()
	err := w.client.CoreV1().Pods(t.pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	w.metrics.bindDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		w.metrics.binds.WithLabelValues("error").Inc()
		w.log.V(2).Info("bind failed", "pod", klog.KObj(t.pod), "node", t.node, "err", err)
		return err
	}
	w.metrics.binds.WithLabelValues("bound").Inc()
	w.metrics.e2e.Observe(time.Since(t.pod.CreationTimestamp.Time).Seconds())
	w.log.V(4).Info("bound", "pod", klog.KObj(t.pod), "node", t.node, "gpus", t.shares)
	return nil
}

// evict asks the Eviction API to remove a victim, at most EvictionQPS per
// second. done(true) means the API refused (a PodDisruptionBudget said no,
// 429) and the victim stays.
func (w *apiWriter) evict(ctx context.Context, pod *corev1.Pod, forGroup, reason string, done func(refused bool)) {
	w.wg.Go(func() {
		if err := w.evictRL.Wait(ctx); err != nil {
			done(true)
			return
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}}
		err := w.client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, ev)
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
