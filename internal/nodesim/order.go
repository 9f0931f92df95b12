package nodesim

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// admissionOrder makes the node admit pods in the order its watch showed
// them bound, as the kubelet's sync loop does (one pod after the other,
// as they arrive), although several workers sync pods at once.
type admissionOrder struct {
	mu      sync.Mutex
	changed *sync.Cond
	// waiting are the pods not yet admitted, in arrival order.
	waiting []types.UID
}

// maxTurnWait bounds how long a pod waits for those that arrived before
// it: one whose sync keeps failing must not stall the node.
const maxTurnWait = 2 * time.Second

func newAdmissionOrder() *admissionOrder {
	o := &admissionOrder{}
	o.changed = sync.NewCond(&o.mu)
	return o
}

// arrive notes a pod the watch shows for the first time.
func (o *admissionOrder) arrive(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	o.mu.Lock()
	if !slices.Contains(o.waiting, p.UID) {
		o.waiting = append(o.waiting, p.UID)
	}
	o.mu.Unlock()
}

// leave drops a deleted pod from the line.
func (o *admissionOrder) leave(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		o.done(p.UID)
	}
}

// wait blocks until every pod that arrived before uid is admitted or gone,
// maxTurnWait at most.
func (o *admissionOrder) wait(ctx context.Context, uid types.UID) {
	deadline := time.Now().Add(maxTurnWait)
	wake := time.AfterFunc(maxTurnWait, func() {
		o.mu.Lock()
		o.changed.Broadcast()
		o.mu.Unlock()
	})
	defer wake.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		i := slices.Index(o.waiting, uid)
		if i <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		o.changed.Wait()
	}
}

// done takes a pod out of the line: admitted, refused, or not to be
// admitted here.
func (o *admissionOrder) done(uid types.UID) {
	o.mu.Lock()
	if i := slices.Index(o.waiting, uid); i >= 0 {
		o.waiting = slices.Delete(o.waiting, i, i+1)
		o.changed.Broadcast()
	}
	o.mu.Unlock()
}
