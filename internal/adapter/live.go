package adapter

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
)

// ForCache is the transform gpuplane-scheduler's informers apply to every
// object before its cache sees it (forCache): a process that keeps a Live
// view from informers of its own gives them this transform, so that it
// holds exactly what the scheduler holds and no more.
func ForCache(obj any) (any, error) { return forCache(obj) }

// Live is the core's view of a cluster kept object by object, as a
// running gpuplane-scheduler keeps it: a cache fed by Upsert and Delete
// (an informer's handlers) and the snapshot builder over it, which
// recomputes only what changed since the last View. It is how a process
// other than the scheduler (gpuplane ui) sees what the core would be
// given, without writing anything to the cluster. Safe for concurrent
// use.
type Live struct {
	c  *clusterCache
	mu sync.Mutex // guards b and r
	b  *builder
	r  *refusals
}

// NewLive returns an empty view of the cluster as gpuplane-scheduler
// named schedulerName sees it.
func NewLive(schedulerName string) *Live {
	return &Live{c: newClusterCache(schedulerName), b: newBuilder(schedulerName, -1, logr.Discard()), r: newRefusals()}
}

// Upsert adds or replaces o, after the informers' transform (ForCache,
// which may trim o in place; an object it already made is taken as is). A kind the scheduler does
// not read is an error naming it.
func (l *Live) Upsert(o runtime.Object) error { return l.apply(o, true) }

// Delete removes o. A kind the scheduler does not read is an error.
func (l *Live) Delete(o runtime.Object) error { return l.apply(o, false) }

func (l *Live) apply(o runtime.Object, upsert bool) error {
	slim, err := forCache(o)
	if err != nil {
		return err
	}
	obj, ok := slim.(runtime.Object)
	if !ok {
		return fmt.Errorf("gpuplane-scheduler does not read a %T", slim)
	}
	return l.c.apply(obj, upsert)
}

// View builds the core's view at time now, as the next cycle of the
// scheduler would. The snapshot is the caller's: later changes to the
// Live view do not reach it.
func (l *Live) View(now time.Time) *View {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := l.c.snapshot(l.b, l.r, now)
	v := &View{Snapshot: in.snap, Held: map[string]string{}, LeftOut: map[string]string{}}
	for _, pi := range in.badPods {
		v.Held[pi.key] = pi.bad.Msg
	}
	for _, g := range in.groups {
		if g.held == nil {
			continue
		}
		for _, pi := range g.pending {
			v.Held[pi.key] = g.held.Msg
		}
	}
	l.c.mu.Lock()
	for name, p := range l.c.badNodes {
		v.LeftOut[name] = p.msg
	}
	l.c.mu.Unlock()
	return v
}
