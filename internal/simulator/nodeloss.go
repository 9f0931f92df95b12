package simulator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// NodeLoss is the spot capacity of an event-mode run: some nodes are spot
// instances that the provider reclaims at random, as a cloud does. A
// reclaimed node first gives notice (model.Node.Disrupted, as a spot
// interruption taint or Karpenter's disruption taint does in a cluster):
// the core places nothing new there and decides what the groups on it do,
// requeued whole or, for an elastic group that keeps its minimum on other
// nodes, shrunk (model.EvictDisruption). Notice seconds later the node is
// gone from the snapshot; ReturnAfter seconds after that it comes back
// empty, a new instance in its place. The zero value reclaims nothing.
type NodeLoss struct {
	// SpotFraction is the share of the trace's nodes that are spot
	// instances, 0 to 1, drawn by the run's seed.
	SpotFraction float64
	// ReclaimPerHour is the rate at which the provider reclaims a spot
	// node in service, per hour of the trace's clock: reclaims arrive as
	// a Poisson process, a node's time in service drawn exponential with
	// mean 1/ReclaimPerHour hours (seeded).
	ReclaimPerHour float64
	// Notice is how long a reclaimed node gives notice before it goes,
	// in trace seconds (a cloud's spot notice: two minutes on AWS, 30 s
	// on GCP and Azure). The core sees the notice in at least one cycle
	// whatever its length.
	Notice int64
	// ReturnAfter is how long a lost node stays away, in trace seconds
	// (0: it never returns).
	ReturnAfter int64
}

// On reports whether nl reclaims any node.
func (nl NodeLoss) On() bool { return nl.SpotFraction > 0 && nl.ReclaimPerHour > 0 }

// Check validates nl, naming the field under the given prefix.
func (nl NodeLoss) Check(field string) error {
	switch {
	case !(nl.SpotFraction >= 0 && nl.SpotFraction <= 1):
		return fmt.Errorf("%s.spotFraction: must be 0 to 1, got %g", field, nl.SpotFraction)
	case !(nl.ReclaimPerHour >= 0) || math.IsInf(nl.ReclaimPerHour, 0):
		return fmt.Errorf("%s.reclaimPerHour: must be a finite rate >= 0, got %g", field, nl.ReclaimPerHour)
	case nl.Notice < 0:
		return fmt.Errorf("%s.notice: must be >= 0 seconds, got %d", field, nl.Notice)
	case nl.ReturnAfter < 0:
		return fmt.Errorf("%s.returnAfter: must be >= 0 seconds (0: never returns), got %d", field, nl.ReturnAfter)
	}
	return nil
}

// Spot node states.
const (
	spotInService = iota
	spotNoticed   // Disrupted: notice given, the node still listed
	spotGone      // not in the snapshot
)

// spotNode is one spot node's life: in service until reclaimAt, noticed
// until goneAt, away until backAt.
type spotNode struct {
	node      model.Node // as the run began, as it comes back
	orig      int        // its index in the run's nodes
	state     int
	reclaimAt int64
	// seen is set once a cycle has run with the notice.
	seen   bool
	goneAt int64
	backAt int64
}

// nodeLoss runs NodeLoss on one event-mode run's snapshot and counts what
// it did.
type nodeLoss struct {
	cfg   NodeLoss
	rng   *rand.Rand
	spots []*spotNode
	// orig maps a node's name to its index among the run's nodes (the
	// trace's order), which results keep however many nodes are away.
	orig map[string]int
	// Counts for EventStats.
	nodesLost int
	pods      int
	gangs     int
	shrunk    int
}

// newNodeLoss picks the spot nodes among nodes by seed and draws their
// first reclaims from start on; nil when cfg reclaims nothing.
func newNodeLoss(cfg NodeLoss, nodes []model.Node, seed uint64, start int64) *nodeLoss {
	if !cfg.On() {
		return nil
	}
	nl := &nodeLoss{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x5b07)), orig: make(map[string]int, len(nodes))}
	for i := range nodes {
		nl.orig[nodes[i].Name] = i
	}
	k := int(math.Round(cfg.SpotFraction * float64(len(nodes))))
	for _, i := range nl.rng.Perm(len(nodes))[:k] {
		nl.spots = append(nl.spots, &spotNode{node: nodes[i], orig: i})
	}
	// In node order, so that the draws follow the seed alone.
	slices.SortFunc(nl.spots, func(a, b *spotNode) int { return a.orig - b.orig })
	for _, s := range nl.spots {
		s.reclaimAt = start + nl.inService()
	}
	return nl
}

// inService draws how long a spot node serves before its next reclaim,
// in whole trace seconds, at least one.
func (nl *nodeLoss) inService() int64 {
	return max(1, int64(math.Round(nl.rng.ExpFloat64()/nl.cfg.ReclaimPerHour*3600)))
}

// original is the index among the run's nodes of the node the snapshot
// lists at i under name.
func (nl *nodeLoss) original(name string, i int) int {
	if nl == nil {
		return i
	}
	return nl.orig[name]
}

// advance brings the snapshot to now: nodes due back return empty and
// draw their next reclaim; nodes whose notice ran out (and was seen by a
// cycle) leave, handing what still runs on them to lose first; spot nodes
// due for reclaim get notice (Disrupted). It changes snap's node list
// and RunningByNode together, each as a new slice, as model.Snapshot's
// chunk rule asks. An error of lose is returned as it is.
func (nl *nodeLoss) advance(snap *model.Snapshot, now int64, lose func(running []model.Allocation) error) error {
	if nl == nil {
		return nil
	}
	var gone map[string]bool
	var back []*spotNode
	noticed := false
	for _, s := range nl.spots {
		switch {
		case s.state == spotGone && nl.cfg.ReturnAfter > 0 && s.backAt <= now:
			back = append(back, s)
		case s.state == spotNoticed && s.seen && s.goneAt <= now:
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[s.node.Name] = true
			s.state, s.backAt = spotGone, now+nl.cfg.ReturnAfter
			nl.nodesLost++
		case s.state == spotInService && s.reclaimAt <= now:
			s.state, s.seen, s.goneAt = spotNoticed, false, now+nl.cfg.Notice
			noticed = true
		}
	}
	if gone == nil && back == nil && !noticed {
		return nil
	}
	// Only what the core may not evict stays on a node after its notice:
	// it is lost with the node, taken off while the node is still listed.
	for i := range snap.Nodes {
		if gone[snap.Nodes[i].Name] && snap.RunningByNode != nil && len(snap.RunningByNode[i]) > 0 {
			if err := lose(slices.Clone(snap.RunningByNode[i])); err != nil {
				return err
			}
		}
	}
	nodes := make([]model.Node, 0, len(snap.Nodes)+len(back))
	var chunks [][]model.Allocation
	if snap.RunningByNode != nil {
		chunks = make([][]model.Allocation, 0, len(snap.Nodes)+len(back))
	}
	for i := range snap.Nodes {
		n := snap.Nodes[i]
		if gone[n.Name] {
			continue
		}
		if s := nl.spot(n.Name); s != nil && s.state == spotNoticed {
			n.Disrupted = true
		}
		nodes = append(nodes, n)
		if chunks != nil {
			chunks = append(chunks, snap.RunningByNode[i])
		}
	}
	for _, s := range back {
		s.state, s.reclaimAt = spotInService, now+nl.inService()
		nodes = append(nodes, s.node)
		if chunks != nil {
			chunks = append(chunks, nil)
		}
	}
	snap.Nodes, snap.RunningByNode = nodes, chunks
	return nil
}

// spot returns the spot node named name, or nil.
func (nl *nodeLoss) spot(name string) *spotNode {
	i, ok := nl.orig[name]
	if !ok {
		return nil
	}
	at, found := slices.BinarySearchFunc(nl.spots, i, func(s *spotNode, i int) int { return s.orig - i })
	if !found {
		return nil
	}
	return nl.spots[at]
}

// cycled records that a cycle saw the notices given so far, and counts
// the pods and groups the cycle's decisions took off nodes going away.
func (nl *nodeLoss) cycled(d *model.Decisions) {
	if nl == nil {
		return
	}
	for _, s := range nl.spots {
		if s.state == spotNoticed {
			s.seen = true
		}
	}
	hit, shrunk := map[string]bool{}, map[string]bool{}
	for _, e := range d.Evictions {
		if e.Reason != model.EvictDisruption {
			continue
		}
		nl.pods++
		hit[e.Group] = true
		if e.Shrink {
			shrunk[e.Group] = true
		}
	}
	nl.gangs += len(hit)
	nl.shrunk += len(shrunk)
}

// lost counts the groups of pods lost with a node (not evicted first).
func (nl *nodeLoss) lost(running []model.Allocation) {
	groups := map[string]bool{}
	for _, a := range running {
		groups[a.Group] = true
	}
	nl.pods += len(running)
	nl.gangs += len(groups)
}

// wake is when the run next needs a cycle for node loss, given other, the
// next event of everything else (MaxInt64: none): a notice running out
// always; a node coming back while groups wait for room; a reclaim only
// before other, since with nothing else to happen the run is over.
func (nl *nodeLoss) wake(other int64, waiting bool) int64 {
	if nl == nil {
		return other
	}
	t := other
	for _, s := range nl.spots {
		switch s.state {
		case spotNoticed:
			t = min(t, s.goneAt)
		case spotGone:
			if waiting && nl.cfg.ReturnAfter > 0 {
				t = min(t, s.backAt)
			}
		case spotInService:
			if other != math.MaxInt64 {
				t = min(t, s.reclaimAt)
			}
		}
	}
	return t
}

// stats writes the counts into ev.
func (nl *nodeLoss) stats(ev *EventStats, lostMilliSeconds float64) {
	if nl == nil {
		return
	}
	ev.SpotNodes = len(nl.spots)
	ev.NodesLost = nl.nodesLost
	ev.NodeLossPods = nl.pods
	ev.NodeLossGangs = nl.gangs
	ev.NodeLossShrunk = nl.shrunk
	ev.LostGPUHoursNodeLoss = lostMilliSeconds / model.MilliPerGPU / 3600
}
