package scheduler

import (
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// StateOf exposes a scheduler's free state to this package's black-box
// tests; drivers read decisions, never the state.
func StateOf(s *Scheduler) *placement.State { return s.st }

// SameNodes and SameAlloc expose how sync tells an unchanged node and an
// unchanged running pod, which it reads by identity before contents.
var (
	SameNodes = sameNodes
	SameAlloc = sameAlloc
)

// NodesOf exposes the node list a scheduler's state was built from (and
// compares the next snapshot's with).
func NodesOf(s *Scheduler) []model.Node { return s.nodes }

// KeptReason exposes the words of a reason that names nodes kept free.
var KeptReason = keptReason

// RepeatAlikeTries makes defragment search again for a group alike the
// last one whose try failed (on) or not (off, as the scheduler runs), and
// returns what puts it back.
func RepeatAlikeTries(on bool) (restore func()) {
	was := repeatAlike
	repeatAlike = on
	return func() { repeatAlike = was }
}
