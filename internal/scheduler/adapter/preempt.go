package adapter

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// maxPreemptionWait bounds how long a preemptor waits for its victims to
// exit before it competes afresh.
const maxPreemptionWait = time.Minute

// victimWait is a preemptor group waiting for the pods evicted for it to
// exit. Its plan, where the core placed it, is held for it meanwhile: the
// GPUs it takes are reserved in every snapshot, so that no other pod (the
// victims' own replacements, say) takes the room the evictions make, and
// it is bound there once the victims are gone.
type victimWait struct {
	victims []string
	since   time.Time
	plan    []model.Bind
	// ready is set once every victim is gone.
	ready bool
}

// reservation is one pod of a waiting preemptor's plan, held on a node.
type reservation struct {
	pod    string
	shares []model.GPUShare
}

// startWait records a preemptor's wait and reserves its plan. Caller holds
// mu.
func (c *clusterCache) startWait(group string, w *victimWait) {
	c.endWait(group)
	c.waiting[group] = w
	for _, b := range w.plan {
		c.reserved[b.Node] = append(c.reserved[b.Node], reservation{pod: b.Pod, shares: b.GPUs})
		c.dirty[b.Node] = true
	}
}

// endWait drops a preemptor's wait and its reservations. Caller holds mu.
func (c *clusterCache) endWait(group string) {
	w := c.waiting[group]
	if w == nil {
		return
	}
	delete(c.waiting, group)
	for _, b := range w.plan {
		rs := c.reserved[b.Node]
		for k := range rs {
			if rs[k].pod == b.Pod {
				rs = append(rs[:k:k], rs[k+1:]...)
				break
			}
		}
		if len(rs) == 0 {
			delete(c.reserved, b.Node)
		} else {
			c.reserved[b.Node] = rs
		}
		c.dirty[b.Node] = true
	}
}

// expireWaits marks the waits whose victims are all gone ready, and ends
// those that waited longer than maxPreemptionWait. Caller holds the cache
// lock.
func (l *loop) expireWaits(now time.Time) {
	for g, w := range l.cache.waiting {
		left := 0
		for _, v := range w.victims {
			if _, ok := l.cache.pods[v]; ok {
				left++
			}
		}
		switch {
		case left == 0:
			w.ready = true
		case now.Sub(w.since) > maxPreemptionWait:
			l.log.Info("a preemptor's victims did not exit in time; it competes afresh", "group", g, "left", left)
			l.cache.endWait(g)
		}
	}
}

// finishWaits binds the preemptors whose victims are gone where their plan
// put them, when the snapshot just built holds all of the plan (the
// reservations fit: nothing else took the room meanwhile); a plan that no
// longer fits is dropped and its group competes afresh next cycle. It
// returns the groups it placed.
func (l *loop) finishWaits(ctx context.Context, in *cycleInput) map[string]bool {
	var ready []string
	l.cache.mu.Lock()
	for g, w := range l.cache.waiting {
		if w.ready {
			ready = append(ready, g)
		}
	}
	l.cache.mu.Unlock()
	if len(ready) == 0 {
		return nil
	}
	held := map[string]string{}
	for a := range in.snap.AllRunning() {
		held[a.Pod] = a.Node
	}
	var binds []model.Bind
	l.cache.mu.Lock()
	for _, g := range ready {
		w := l.cache.waiting[g]
		fits := true
		for _, b := range w.plan {
			fits = fits && held[b.Pod] == b.Node
		}
		if fits {
			binds = append(binds, w.plan...)
		} else {
			l.log.Info("a preemptor's plan no longer fits; it competes afresh", "group", g)
		}
		l.cache.endWait(g)
	}
	l.cache.mu.Unlock()
	if len(binds) == 0 {
		return nil
	}
	return l.bind(ctx, in, binds, nil)
}

// evict sends the cycle's evictions and returns the groups that wait for
// them; their binds in d become their plan.
func (l *loop) evict(ctx context.Context, in *cycleInput, d *model.Decisions, now time.Time) map[string]bool {
	blocked := map[string]bool{}
	if len(d.Evictions) == 0 {
		return blocked
	}
	byFor := map[string][]model.Eviction{}
	for _, e := range d.Evictions {
		blocked[e.For] = true
		byFor[e.For] = append(byFor[e.For], e)
	}
	victims := map[string]*corev1.Pod{}
	l.cache.mu.Lock()
	for g, es := range byFor {
		w := &victimWait{since: now}
		for _, e := range es {
			w.victims = append(w.victims, e.Pod)
			if pi := l.cache.pods[e.Pod]; pi != nil {
				victims[e.Pod] = pi.pod
			}
		}
		for _, b := range d.Binds {
			if b.Group == g {
				w.plan = append(w.plan, b)
			}
		}
		l.cache.startWait(g, w)
	}
	l.cache.mu.Unlock()
	for g, es := range byFor {
		for _, e := range es {
			pod := victims[e.Pod]
			if pod == nil {
				continue
			}
			l.api.evict(ctx, pod, g, e.Reason, func(refused bool) {
				if refused {
					// The victim stays; the preemptor competes afresh, and
					// the victim is not offered again for a while.
					l.cache.refuse(e.Pod, time.Now().Add(l.cfg.EvictionBackoff))
					l.cache.mu.Lock()
					l.cache.endWait(g)
					l.cache.mu.Unlock()
				}
			})
		}
	}
	return blocked
}
