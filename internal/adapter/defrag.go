package adapter

import (
	"time"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Defragmentation and elastic groups, as the adapter translates them. The
// core decides every move and every shrink; the adapter tells it which
// workloads opted in to moves (v1alpha1.MovableAnnotation, on the
// workload or its Queue), each running pod's gang size (its PodGroup's
// spec.minMember, which an elastic group shrinks toward), and the moves
// of the last hour against --defrag-moves-per-hour. A gang placed by its
// topology is never offered as movable. A move's pods are
// evicted like any victim; the group is held where the core placed it
// again and bound there once its pods are made again under their names (a
// StatefulSet's, a PyTorchJob's), else it competes afresh.

// moveWindow is the span Config.DefragMovesPerHour counts moves over.
const moveWindow = time.Hour

// queueMovable reads a Queue's MovableAnnotation into b.movableQueues; a
// value that is not a boolean is the queue's error, naming it.
func (b *builder) queueMovable(q *v1alpha1.Queue) error {
	m, _, err := v1alpha1.ParseMovable(q.Annotations)
	if err != nil {
		return err
	}
	if m {
		b.movableQueues[q.Name] = true
	}
	return nil
}

// groupMovable says whether a group's workload opted in to moves: its
// PodGroup's annotation when set, else its members' (a member saying
// "false" keeps the group in place), else its queue's. A member or
// PodGroup whose value is not a boolean is an error naming the annotation.
func (b *builder) groupMovable(pg *v1alpha1.PodGroup, members map[string]*podInfo, queue string) (bool, *BadInputError) {
	if pg != nil {
		m, set, err := v1alpha1.ParseMovable(pg.Annotations)
		if err != nil {
			return false, badInput("InvalidPodGroup", "PodGroup %s/%s: %v", pg.Namespace, pg.Name, err)
		}
		if set {
			return m, nil
		}
	}
	yes, no := false, false
	for _, pi := range members {
		m, set, err := v1alpha1.ParseMovable(pi.pod.Annotations)
		if err != nil {
			return false, badInput("InvalidAnnotation", "pod %s: %v", pi.key, err)
		}
		yes, no = yes || set && m, no || set && !m
	}
	switch {
	case no:
		return false, nil
	case yes:
		return true, nil
	}
	return b.movableQueues[queue], nil
}

// runningMovable is groupMovable for a placed pod's group, memoized per
// snapshot; a bad value keeps the group in place (the pods already run).
func (b *builder) runningMovable(c *clusterCache, pi *podInfo, queue string) bool {
	if m, ok := b.groupMovables[pi.group]; ok {
		return m
	}
	var pg *v1alpha1.PodGroup
	if pi.pg != "" {
		pg = c.podGroups[pi.pg]
	}
	members := c.members[pi.group]
	if members == nil {
		members = map[string]*podInfo{pi.key: pi}
	}
	m, bad := b.groupMovable(pg, members, queue)
	m = m && bad == nil
	if m && pi.pg != "" {
		// A gang placed by its topology stays: the core places a moved
		// group again without one.
		if tc, _, _ := groupConstraint(&groupInfo{name: pi.group, pgKey: pi.pg, pg: pg}, members); tc != nil {
			m = false
		}
	}
	b.groupMovables[pi.group] = m
	return m
}

// runningMinMember is a placed pod's gang size: its PodGroup's
// spec.minMember, 0 (all of it) for a pod without one.
func runningMinMember(c *clusterCache, pi *podInfo) int {
	if pi.pg == "" {
		return 0
	}
	if pg := c.podGroups[pi.pg]; pg != nil && pg.Spec.MinMember > 0 {
		return int(pg.Spec.MinMember)
	}
	return 0
}

// moveLog keeps the moves of the last window between cycles: the
// snapshot's DefragPolicy reads them, the core's decisions add to them.
type moveLog struct {
	perWindow int
	// drainAfter is Config.DefragDrainAfter, maxLostWork
	// Config.DefragMaxLostWork.
	drainAfter, maxLostWork time.Duration
	recent                  []model.Move
}

// policy is the snapshot's DefragPolicy at now (Snapshot.Now, in
// milliseconds).
func (l *moveLog) policy() model.DefragPolicy {
	return model.DefragPolicy{MaxMoves: l.perWindow, Window: moveWindow.Milliseconds(), Recent: l.recent, DrainAfter: l.drainAfter.Milliseconds(),
		MaxLostWork: l.maxLostWork.Milliseconds()}
}

// record adds a cycle's moves and forgets those past the window.
func (l *moveLog) record(moves []model.Move, now int64) {
	p := l.policy()
	p.Record(moves, now)
	l.recent = p.Recent
}
