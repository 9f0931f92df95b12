package adapter

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// statusWriter writes pod conditions, PodGroup and Queue status at a
// bounded rate. Writes are keyed by object: a newer write for an object
// replaces one still queued, so a backlog never holds stale states.
type statusWriter struct {
	client   kubernetes.Interface
	dyn      dynamic.Interface
	recorder record.EventRecorder
	log      klog.Logger
	rl       flowcontrol.RateLimiter

	mu     sync.Mutex
	queued map[string]func(context.Context) error
	order  []string
	wake   chan struct{}
}

func newStatusWriter(client kubernetes.Interface, dyn dynamic.Interface, recorder record.EventRecorder, qps float32, log klog.Logger) *statusWriter {
	return &statusWriter{client: client, dyn: dyn, recorder: recorder, log: log,
		rl:     flowcontrol.NewTokenBucketRateLimiter(qps, max(1, int(qps))),
		queued: map[string]func(context.Context) error{}, wake: make(chan struct{}, 1)}
}

func (w *statusWriter) event(obj runtime.Object, typ, reason, msg string) {
	if w.recorder != nil {
		w.recorder.Event(obj, typ, reason, reasons.WithDocs(reason, msg))
	}
}

func (w *statusWriter) enqueue(key string, write func(context.Context) error) {
	w.mu.Lock()
	if _, ok := w.queued[key]; !ok {
		w.order = append(w.order, key)
	}
	w.queued[key] = write
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes queued states until ctx ends.
func (w *statusWriter) run(ctx context.Context) {
	for {
		w.mu.Lock()
		if len(w.order) == 0 {
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		key := w.order[0]
		w.order = w.order[1:]
		write := w.queued[key]
		delete(w.queued, key)
		w.mu.Unlock()
		if err := w.rl.Wait(ctx); err != nil {
			return
		}
		if err := write(ctx); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.log.V(2).Info("status write failed; the next cycle retries", "object", key, "err", err)
		}
	}
}

// podCondition sets PodScheduled=False with reason and message when the pod
// does not already say so, and records an event for the new message.
func (w *statusWriter) podCondition(pod *corev1.Pod, reason, msg string) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == reason && c.Message == msg {
			return
		}
	}
	key := "pod/" + podKey(pod)
	w.enqueue(key, func(ctx context.Context) error {
		// The resourceVersion makes the write fail (a conflict, dropped)
		// when the pod changed since: above all when it was bound
		// meanwhile, which a backlog of status writes can outlast.
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":{"conditions":[{"type":%q,"status":"False","reason":%q,"message":%q,"lastTransitionTime":%q}]}}`,
			pod.ResourceVersion, corev1.PodScheduled, reason, msg, metav1.Now().UTC().Format("2006-01-02T15:04:05Z"))
		_, err := w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		if err == nil {
			// Waiting one's turn is normal: for the pods evicted for
			// it, for its queue's quota, for its gang's other pods.
			evType := corev1.EventTypeWarning
			switch reason {
			case model.UnplacedWaitingForVictims, model.UnplacedQueueLimit, model.UnplacedMissingMembers, model.UnplacedNodesComing:
				evType = corev1.EventTypeNormal
			}
			w.event(pod, evType, reasonOrUnschedulable(reason), msg)
		}
		return err
	})
}

func reasonOrUnschedulable(r string) string {
	if r == "" {
		return "FailedScheduling"
	}
	if r == corev1.PodReasonUnschedulable {
		return "FailedScheduling"
	}
	return r
}

// updateStatus writes obj's status subresource through the dynamic client.
func (w *statusWriter) updateStatus(key string, gvr schema.GroupVersionResource, namespace string, obj runtime.Object) {
	w.enqueue(key, func(ctx context.Context) error {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return fmt.Errorf("converting %s: %w", key, err)
		}
		_, err = w.dyn.Resource(gvr).Namespace(namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
		return err
	})
}
