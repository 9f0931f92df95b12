package adapter

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// View is the core's view of a cluster as one cycle of gpuplane-scheduler
// builds it: the snapshot the core is handed, and what the adapter keeps
// from the core before it (pods held back by what they say, nodes left out
// for what they state).
type View struct {
	// Snapshot is what the core is given: the nodes (with the labels of
	// the pending pods' predicate classes), the running allocations by
	// node, the pending groups and the queues.
	Snapshot model.Snapshot
	// Held says, by namespace/name, why a pending pod of the scheduler's
	// is not offered to the core (its spec, its group or its claims).
	Held map[string]string
	// LeftOut says, by name, why a node is left out of scheduling.
	LeftOut map[string]string
}

// ViewOf builds the core's view of objs exactly as a cycle of
// gpuplane-scheduler named schedulerName builds it from its informers:
// each object through the informers' transform (forCache) into a cache of
// its own, by the same handler its informer calls, then the snapshot
// builder over that cache at time now. It needs no API server, so what
// the core is given for a set of objects can be looked at offline (the
// differential test in test/conformance compares the core's feasible
// nodes with kube-scheduler's on it). A running scheduler builds the same
// view incrementally; the cache's property test checks that the two
// agree. objs are not modified. A kind the scheduler does not read is an
// error naming it: leaving it out would describe a cluster the scheduler
// never sees.
func ViewOf(schedulerName string, objs []runtime.Object, now time.Time) (*View, error) {
	l := NewLive(schedulerName)
	for i, o := range objs {
		if err := l.Upsert(o.DeepCopyObject()); err != nil {
			return nil, fmt.Errorf("objs[%d]: %w", i, err)
		}
	}
	return l.View(now), nil
}
