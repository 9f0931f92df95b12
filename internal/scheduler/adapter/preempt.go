package adapter

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// maxPreemptionWait bounds how long a preemptor waits for its victims to
// exit before it competes afresh (model.Snapshot.HoldTimeout).
const maxPreemptionWait = time.Minute

// holdBook carries the core's holds (preemptors waiting for their
// victims) from one cycle's decisions to the next snapshot. The core
// decides them; the adapter only drops one whose eviction the API
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

// drop ends a group's hold: it competes afresh next cycle.
func (h *holdBook) drop(group string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]model.Hold, 0, len(h.holds))
	for _, x := range h.holds {
		if x.Group != group {
			out = append(out, x)
		}
	}
	h.holds = out
}

// evict sends the cycle's evictions. A refused one (a PodDisruptionBudget
// said no) leaves its victim alone for EvictionBackoff and ends the hold
// of the group it was for, which competes afresh.
func (l *loop) evict(ctx context.Context, d *model.Decisions) {
	if len(d.Evictions) == 0 {
		return
	}
	victims := make([]*corev1.Pod, len(d.Evictions))
	l.cache.mu.Lock()
	for k, e := range d.Evictions {
		if pi := l.cache.pods[e.Pod]; pi != nil {
			victims[k] = pi.pod
		}
	}
	l.cache.mu.Unlock()
	for k, e := range d.Evictions {
		if victims[k] == nil {
			continue
		}
		l.api.evict(ctx, victims[k], e.For, e.Reason, func(refused bool) {
			if refused {
				l.cache.refuse(e.Pod, time.Now().Add(l.cfg.EvictionBackoff))
				l.holds.drop(e.For)
			}
		})
	}
}
