package model

import "fmt"

// DefragPolicy bounds defragmentation: the moves the core makes of
// running Movable groups so that a gang that waits only because free GPUs
// are scattered can start (the core's defrag.go).
type DefragPolicy struct {
	// MaxMoves is how many groups may be moved within any Window; 0 turns
	// defragmentation off.
	MaxMoves int `json:"maxMoves,omitempty"`
	// Window is the span MaxMoves counts over, in Snapshot.Now's unit
	// (an hour: 3600 in seconds, 3600000 in milliseconds).
	Window int64 `json:"window,omitempty"`
	// Recent are the moves made within the last Window, as cycles
	// returned them (Decisions.Moves): they count against MaxMoves, and a
	// group among them is not moved again until its move leaves the
	// window. Record keeps it.
	Recent []Move `json:"recent,omitempty"`
	// DrainAfter, when positive and MaxMoves is set, is how long (in
	// Snapshot.Now's unit, from PodGroup.CreatedAt) a group with a pod
	// that needs a whole node waits before the core drains a node for
	// it: it keeps new work off the node cheapest to empty, counting only
	// the work there that may not move, and moves the movable work off
	// once nothing else stands in the way (the core's drain.go). 0 drains
	// nothing.
	DrainAfter int64 `json:"drainAfter,omitempty"`
	// MaxLostWork, when positive, is the most work a move may throw away:
	// a group is moved only while its restart point (its members' last
	// checkpoint, or their start where none reported one) is at most
	// this long ago (in Snapshot.Now's unit). A group further from its
	// restart point stays until it checkpoints again. 0 bounds nothing.
	MaxLostWork int64 `json:"maxLostWork,omitempty"`
}

// Move is one group moved to defragment: its pods evicted where they ran
// and placed elsewhere in the same cycle's plan, held there for it
// (Hold.Moved), so that For can start in the room it left.
type Move struct {
	// Group is the group moved, For the group it made room for.
	Group string `json:"group"`
	For   string `json:"for"`
	// At is the Snapshot.Now of the cycle that moved it.
	At int64 `json:"at"`
	// Pods and GPUMilli are what it moved: its pods and the milli-GPU
	// they hold.
	Pods     int   `json:"pods"`
	GPUMilli int64 `json:"gpuMilli,omitempty"`
}

// Check reports a policy that means nothing, naming the field under
// prefix.
func (p *DefragPolicy) Check(prefix string) error {
	switch {
	case p.MaxMoves < 0:
		return fmt.Errorf("%s.maxMoves: must be >= 0, got %d", prefix, p.MaxMoves)
	case p.MaxMoves > 0 && p.Window <= 0:
		return fmt.Errorf("%s.window: must be > 0 when maxMoves is set, got %d", prefix, p.Window)
	case p.DrainAfter < 0:
		return fmt.Errorf("%s.drainAfter: must be >= 0, got %d", prefix, p.DrainAfter)
	case p.MaxLostWork < 0:
		return fmt.Errorf("%s.maxLostWork: must be >= 0, got %d", prefix, p.MaxLostWork)
	}
	return nil
}

// Record adds a cycle's moves to Recent and drops those that left the
// window ending at now: what the next snapshot's policy carries. Recent
// is replaced, not written, so a copy of the policy taken before keeps
// its view.
func (p *DefragPolicy) Record(moves []Move, now int64) {
	if len(p.Recent) == 0 && len(moves) == 0 {
		return
	}
	out := make([]Move, 0, len(p.Recent)+len(moves))
	for _, m := range p.Recent {
		if p.Window > 0 && now-m.At < p.Window {
			out = append(out, m)
		}
	}
	p.Recent = append(out, moves...)
}

// Left is how many moves the policy allows in a cycle at now: MaxMoves
// less those of Recent within the window; 0 when off.
func (p *DefragPolicy) Left(now int64) int {
	if p.MaxMoves <= 0 || p.Window <= 0 {
		return 0
	}
	n := p.MaxMoves
	for _, m := range p.Recent {
		if now-m.At < p.Window {
			n--
		}
	}
	return max(n, 0)
}
