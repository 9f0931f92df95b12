package simulator

import (
	"math"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// checkpoint brings the running pods' last checkpoints up to now
// (simPod.lastCheckpoint: the latest multiple of TracePod.CheckpointEvery
// since this run began). A node whose
// pods' checkpoints moved gets a new chunk, as the snapshot's chunk rule
// asks, so the core reads them; the others keep theirs.
func checkpoint(snap *model.Snapshot, byName map[string]*simPod, now int64) {
	cloned := false
	for n, chunk := range snap.RunningByNode {
		var fresh []model.Allocation
		for i := range chunk {
			a := &chunk[i]
			p := byName[a.Pod]
			if p == nil || p.tp.CheckpointEvery <= 0 || now < p.runStart {
				continue
			}
			last := p.lastCheckpoint(now)
			if last == p.runStart || last == a.LastCheckpoint {
				continue // none yet in this run, or no new one
			}
			if fresh == nil {
				fresh = slices.Clone(chunk)
			}
			fresh[i].LastCheckpoint = last
		}
		if fresh != nil {
			if !cloned {
				// Replaced, not written: a copy of snap taken before
				// keeps its view (model.Apply does the same).
				snap.RunningByNode, cloned = slices.Clone(snap.RunningByNode), true
			}
			snap.RunningByNode[n] = fresh
		}
	}
}

// minRuntimes is, per queue name, the largest Queue.MinRuntime on its path
// to the root, for the queues that have one; a name the trace does not
// define counts in the default queue, as the core counts it.
func minRuntimes(queues []model.Queue) map[string]int64 {
	spec := make(map[string]model.Queue, len(queues))
	for _, q := range queues {
		spec[q.Name] = q
	}
	out := map[string]int64{}
	for _, q := range queues {
		var m int64
		name := q.Name
		for seen := 0; name != "" && seen <= len(spec); seen++ {
			m = max(m, spec[name].MinRuntime)
			name = spec[name].Parent
		}
		if m > 0 {
			out[q.Name] = m
		}
	}
	return out
}

// protectedUntil is the earliest time after now at which a running pod's
// minimum runtime ends (its own, or its queue's), or math.MaxInt64 when
// none does: a group waiting for a victim may place then, and the clock
// must not pass it by.
func protectedUntil(snap *model.Snapshot, queueMin map[string]int64, now int64) int64 {
	until := int64(math.MaxInt64)
	for a := range snap.AllRunning() {
		q := a.Queue
		if _, ok := queueMin[q]; !ok && q == "" {
			q = queue.DefaultQueue
		}
		if end := a.StartedAt + max(a.MinRuntime, queueMin[q]); end > now {
			until = min(until, end)
		}
	}
	return until
}
