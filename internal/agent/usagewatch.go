package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/internal/metrics"
)

// Events the usage watch records on pods.
const (
	// ReasonGPUMemoryOverLimit: a pod's processes use more GPU memory than
	// the part of a GPU it asked for.
	ReasonGPUMemoryOverLimit = "GPUMemoryOverLimit"
	// ReasonGPUNotGiven: a pod's process runs on a GPU none of its
	// containers was given.
	ReasonGPUNotGiven = "GPUNotGiven"
	// ReasonEvictedOverLimit: the over-limit policy evicted the pod.
	ReasonEvictedOverLimit = "EvictedOverGPUMemoryLimit"
	// ReasonEvictionRefused: the Eviction API refused (a
	// PodDisruptionBudget); the watch tries again later.
	ReasonEvictionRefused = "OverLimitEvictionRefused"
)

// Over-limit policies (--gpu-memory-over-limit).
const (
	OverLimitReport = "report"
	OverLimitEvict  = "evict"
)

// usageWatch checks, on a timer of its own rather than Prometheus', the GPU
// memory each pod's processes use (attributed by the metrics exporter,
// metrics.Exporter.Usage) against the memory the pod asked for when it
// asked for part of a GPU, and the processes pods run on GPUs they were not
// given. Time-slicing cannot enforce a memory limit, so going over is made
// visible at once: a Warning event on the pod, once per episode; with the
// evict policy, a pod over its limit for grace is evicted through the
// Eviction API, so PodDisruptionBudgets hold. Only pods that asked for a
// memory limit are ever evicted; a refused eviction is said on the pod and
// tried again after backoff.
type usageWatch struct {
	usage    func(context.Context) (metrics.Usage, error)
	limitOf  func(namespace, pod string) (int64, bool)
	podByKey func(namespace, name string) (*corev1.Pod, bool)
	podByUID func(uid types.UID) (*corev1.Pod, bool)
	recorder record.EventRecorder
	// evict is nil unless the policy is evict.
	evict func(ctx context.Context, pod *corev1.Pod) error

	interval, grace, backoff time.Duration
	now                      func() time.Time
	log                      *slog.Logger

	// overSince is when each pod was first seen over its limit in the
	// current episode; retryAt when a refused eviction may be tried again;
	// foreign the episodes of processes on GPUs not given, by pod and GPU.
	overSince map[types.UID]time.Time
	retryAt   map[types.UID]time.Time
	foreign   map[string]bool
	// failing is the last error of Usage, logged once until it changes.
	failing string
}

func newUsageWatch(usage func(context.Context) (metrics.Usage, error), pods *nodePods, recorder record.EventRecorder,
	evict func(context.Context, *corev1.Pod) error, grace time.Duration, log *slog.Logger) *usageWatch {
	return &usageWatch{
		usage: usage, limitOf: pods.memoryLimitOf, podByKey: pods.byKey, podByUID: pods.byUID,
		recorder: recorder, evict: evict,
		interval: 5 * time.Second, grace: grace, backoff: time.Minute, now: time.Now, log: log,
		overSince: map[types.UID]time.Time{}, retryAt: map[types.UID]time.Time{}, foreign: map[string]bool{},
	}
}

func (w *usageWatch) run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.check(ctx)
		}
	}
}

// check runs one round.
func (w *usageWatch) check(ctx context.Context) {
	u, err := w.usage(ctx)
	if err != nil {
		if msg := err.Error(); msg != w.failing {
			w.failing = msg
			w.log.Warn("cannot attribute GPU use to pods now; memory limits and GPUs not given are not checked until it can", "err", err)
		}
		return
	}
	w.failing = ""
	now := w.now()
	over := map[types.UID]bool{}
	for _, g := range u.Pods {
		limit, ok := w.limitOf(g.Namespace, g.Pod)
		if !ok || int64(g.UsedMiB) <= limit {
			continue
		}
		p, ok := w.podByKey(g.Namespace, g.Pod)
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		over[p.UID] = true
		since, seen := w.overSince[p.UID]
		if !seen {
			since = now
			w.overSince[p.UID] = now
			msg := fmt.Sprintf("uses %d MiB of GPU %d (%s), more than the %d MiB it asked for; time-slicing cannot hold it to that", g.UsedMiB, g.GPU, g.UUID, limit)
			if w.evict != nil {
				msg += fmt.Sprintf(", and it is evicted if it stays over for %s", w.grace)
			}
			w.recorder.Event(p, corev1.EventTypeWarning, ReasonGPUMemoryOverLimit, reasons.WithDocs(ReasonGPUMemoryOverLimit, msg))
			w.log.Warn("pod over its GPU memory limit", "pod", g.Namespace+"/"+g.Pod, "usedMiB", g.UsedMiB, "limitMiB", limit, "gpu", g.GPU)
		}
		if w.evict != nil && now.Sub(since) >= w.grace && !now.Before(w.retryAt[p.UID]) {
			w.doEvict(ctx, p, g, limit, now)
		}
	}
	for uid := range w.overSince {
		if !over[uid] {
			delete(w.overSince, uid) // back under: a new episode next time
			delete(w.retryAt, uid)
		}
	}

	seen := map[string]bool{}
	for _, f := range u.Foreign {
		key := fmt.Sprintf("%s/%d", f.PodUID, f.GPU)
		seen[key] = true
		if w.foreign[key] {
			continue
		}
		p, ok := w.podByUID(types.UID(f.PodUID))
		if !ok {
			continue // not a pod of this node's watch (yet): try next round
		}
		w.foreign[key] = true
		given := "none of the node's containers"
		if len(f.Holders) > 0 {
			given = fmt.Sprintf("%v", f.Holders)
		}
		w.recorder.Event(p, corev1.EventTypeWarning, ReasonGPUNotGiven, reasons.WithDocs(ReasonGPUNotGiven,
			fmt.Sprintf("runs %d processes on GPU %d (%s), which was given to %s, not to this pod: it reached past the device plugin (privileged, NVIDIA_VISIBLE_DEVICES, or a /dev/nvidia* mount)", f.Processes, f.GPU, f.UUID, given)))
		w.log.Warn("pod's process on a GPU it was not given", "pod", p.Namespace+"/"+p.Name, "gpu", f.GPU, "givenTo", f.Holders)
	}
	for key := range w.foreign {
		if !seen[key] {
			delete(w.foreign, key)
		}
	}
}

func (w *usageWatch) doEvict(ctx context.Context, p *corev1.Pod, g metrics.GPUUse, limit int64, now time.Time) {
	err := w.evict(ctx, p)
	switch {
	case err == nil:
		w.recorder.Event(p, corev1.EventTypeWarning, ReasonEvictedOverLimit, reasons.WithDocs(ReasonEvictedOverLimit,
			fmt.Sprintf("evicted: used %d MiB of GPU %d, more than the %d MiB it asked for, for %s or more (--gpu-memory-over-limit=evict)", g.UsedMiB, g.GPU, limit, w.grace)))
		w.log.Warn("evicted a pod over its GPU memory limit", "pod", p.Namespace+"/"+p.Name)
		w.retryAt[p.UID] = now.Add(w.backoff) // until the pod is gone
	case apierrors.IsNotFound(err):
	default:
		w.retryAt[p.UID] = now.Add(w.backoff)
		w.recorder.Event(p, corev1.EventTypeWarning, ReasonEvictionRefused, reasons.WithDocs(ReasonEvictionRefused,
			fmt.Sprintf("over its GPU memory limit, but the eviction was refused: %v; trying again in %s", err, w.backoff)))
		w.log.Warn("eviction of a pod over its GPU memory limit refused", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}
