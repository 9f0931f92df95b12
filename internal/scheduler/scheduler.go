package scheduler

import (
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"time"
	"unsafe"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// Config configures a Scheduler.
type Config struct {
	// Policy names the placement policy (placement.NewPolicy); empty
	// means placement.DefaultPolicy.
	Policy string
	// Targets is the pod mix FGD-based policies measure fragmentation
	// against; empty means the pending and running pods of the first
	// snapshot.
	Targets []placement.Target
	// Seed seeds randomised plugins.
	Seed uint64
	// Logger receives per-cycle detail; nil discards.
	Logger *slog.Logger
}

// Scheduler runs cycles. It keeps the cluster's free state, the running
// pods by node, their groups and each queue's usage between cycles, and
// applies only what changed in each new snapshot (doc.go says how it tells),
// so a cycle's cost follows the changes and the pending work, not the
// cluster. A Scheduler is not safe for concurrent use.
type Scheduler struct {
	cfg      Config
	log      *slog.Logger
	nodes    []model.Node
	index    map[string]int
	capacity model.Resources
	st       *placement.State
	placer   *placement.Placer
	// policy is the placer's, kept for a what-if's own placer
	// (awaitComing).
	policy placement.Policy
	run    *running
	// chunks is, per node, the running chunk last applied to it.
	chunks []chunkID
	// touched lists the nodes the last cycle's binds and evictions
	// changed in st ahead of the snapshot; the next sync compares them
	// whatever their chunks say.
	touched []int
	// epoch counts cycles; mark[i] == epoch queues node i for this sync.
	epoch uint64
	mark  []uint64
	diff  []int
	// topo holds the domains of each list of topology levels gangs named
	// (topology.go), until the nodes change.
	topo map[string]*topoIndex
	// tieLevels are the levels the placer's tie order was taken from
	// (topology), nil before any.
	tieLevels []string
	// relabel is syncNodes' scratch: the nodes whose labels changed.
	relabel []int
	// disrupted lists the nodes about to go away (model.Node.Disrupted),
	// found when the nodes are read (reset), so that a cycle does not look
	// at every node for them.
	disrupted []int
	// coming lists the nodes yet to register their GPUs
	// (model.Node.Coming) that are not Disrupted, found likewise
	// (coming.go).
	coming []int
	// looks counts looks over running groups (runningGroup.seen).
	looks uint64
	// rooms is scratch space for topology gangs' rooms per node.
	rooms [][]int32
	// free keeps the nodes by whole GPUs free for moves (defrag.go).
	free freeIndex
}

// New returns a scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Policy == "" {
		cfg.Policy = placement.DefaultPolicy
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Check the policy name now rather than at the first cycle.
	if _, err := placement.NewPolicy(cfg.Policy, placement.PolicyEnv{Targets: []placement.Target{{P: 1}}}); err != nil {
		return nil, fmt.Errorf("creating scheduler: %w", err)
	}
	return &Scheduler{cfg: cfg, log: log}, nil
}

// Cycle schedules one snapshot and returns its decisions. The snapshot is
// not modified. The decisions are also applied to the scheduler's own
// state: binds count as running and evictions as gone until a later
// snapshot says otherwise.
func (s *Scheduler) Cycle(snap *model.Snapshot) (model.Decisions, error) {
	var d model.Decisions
	t := newTimer(&d)
	// 1. Sync: bring the free state in line with the snapshot's nodes and
	//    running allocations, changing only what differs.
	if err := s.sync(snap); err != nil {
		return d, err
	}
	t.phase("sync")
	// 2. Queues: validate the hierarchy, add usage and pending demand,
	//    compute fair shares, and order the pending groups.
	c, err := s.newCycle(snap, &d)
	if err != nil {
		return d, err
	}
	t.phase("queues")
	// 3. Disruption: groups with a pod on a node about to go away are
	//    evicted whole, to be placed again elsewhere.
	c.disrupt()
	t.phase("disruption")
	// 3b. Holds: bind the preemptors whose victims are gone, keep the
	//    room of those still waiting.
	c.resumeHolds()
	t.phase("holds")
	// 3c. Drain: keep new work off the nodes cheapest to empty for the
	//    groups that waited long for whole nodes (drain.go).
	c.drain()
	t.phase("drain")
	// 4. Allocate: place whole groups queue by queue, fairest first.
	c.allocate()
	t.phase("allocate")
	// 5. Backfill: fill holes without taking a blocked head's reservation.
	c.backfill()
	t.phase("backfill")
	// 6. Preempt: within a queue, by strictly higher priority.
	c.evictFor(false)
	t.phase("preempt")
	// 7. Reclaim: across queues, up to the reclaimer's fair share, else
	//    within its GPU guarantee.
	c.evictFor(true)
	t.phase("reclaim")
	// 8. Defragment: move Movable groups out of the way of a group that
	//    waits only because free GPUs are scattered (defrag.go).
	c.defragment()
	t.phase("defragment")
	// 9. Record what stays pending and keep the plan in our state.
	c.finish()
	t.phase("finish")
	// 10. Layouts: propose MIG layouts for idle GPUs of the nodes that
	//    follow demand, for what stays pending for want of room.
	c.proposeLayouts()
	t.phase("layouts")
	s.log.Debug("scheduling cycle", "binds", len(d.Binds), "evictions", len(d.Evictions), "holds", len(d.Holds), "moves", len(d.Moves), "unplaced", len(d.Unplaced), "layouts", len(d.Layouts))
	return d, nil
}

type timer struct {
	d    *model.Decisions
	last time.Time
}

func newTimer(d *model.Decisions) *timer { return &timer{d: d, last: time.Now()} }

func (t *timer) phase(name string) {
	now := time.Now()
	t.d.Timings = append(t.d.Timings, model.PhaseTiming{Phase: name, Nanos: now.Sub(t.last).Nanoseconds()})
	t.last = now
}

// sameNodes reports whether two node lists are equal as the state sees
// them. The scheduler keeps a shallow copy of the last list, so a node
// whose name, GPUs, taints, labels and other maps are the very ones it saw
// (as a driver that passes unchanged nodes again does) is equal without
// reading them: over thousands of nodes the walk is bound by memory, and
// it reads nothing beyond the nodes themselves until a node differs.
func sameNodes(a, b []model.Node) bool { return matchNodes(a, b, false) }

// matchNodes is sameNodes. With adopt, a node of a that equals b's in
// every field the state reads, but not by identity, takes b's name,
// slices, maps and volumes (its Topology and MIG stay a's, as the state
// read them): a driver that rebuilds its node list with equal contents
// (new label maps, say) costs the field-by-field comparison once, not on
// every cycle after. The state keeps pointers to a's elements, never to
// their maps, and reads nothing that differs.
func matchNodes(a, b []model.Node, adopt bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		// The identity check is written out here, not left to matchNode,
		// so that the walk over unchanged nodes stays one loop.
		if sameString(x.Name, y.Name) && x.MilliCPU == y.MilliCPU && x.MemoryMiB == y.MemoryMiB && x.Unschedulable == y.Unschedulable && x.Disrupted == y.Disrupted && x.Coming == y.Coming &&
			sameSlice(x.GPUs, y.GPUs) && sameSlice(x.Taints, y.Taints) && x.Volumes == y.Volumes &&
			mapID(x.Labels) == mapID(y.Labels) && mapID(x.Domains) == mapID(y.Domains) && mapID(x.Allocatable) == mapID(y.Allocatable) {
			continue
		}
		if !matchNode(x, y, adopt) {
			return false
		}
	}
	return true
}

// matchNode is matchNodes for one node.
func matchNode(x, y *model.Node, adopt bool) bool {
	if sameString(x.Name, y.Name) && x.MilliCPU == y.MilliCPU && x.MemoryMiB == y.MemoryMiB && x.Unschedulable == y.Unschedulable && x.Disrupted == y.Disrupted && x.Coming == y.Coming &&
		sameSlice(x.GPUs, y.GPUs) && sameSlice(x.Taints, y.Taints) && x.Volumes == y.Volumes &&
		mapID(x.Labels) == mapID(y.Labels) && mapID(x.Domains) == mapID(y.Domains) && mapID(x.Allocatable) == mapID(y.Allocatable) {
		return true
	}
	if !sameNode(x, y) {
		return false
	}
	if adopt {
		topo, mig := x.Topology, x.MIG
		*x = *y
		x.Topology, x.MIG = topo, mig
	}
	return true
}

// sameNode compares two nodes field by field, as sameNodes does those it
// cannot tell equal by identity. Labels and Domains compare by entries (nil
// and empty alike); Allocatable nil (check nothing) differs from empty
// (check the pod count and every resource against zero).
func sameNode(x, y *model.Node) bool {
	return x.Name == y.Name && x.MilliCPU == y.MilliCPU && x.MemoryMiB == y.MemoryMiB && x.Unschedulable == y.Unschedulable && x.Disrupted == y.Disrupted && x.Coming == y.Coming &&
		slices.Equal(x.GPUs, y.GPUs) && slices.Equal(x.Taints, y.Taints) &&
		(x.Volumes == y.Volumes || reflect.DeepEqual(x.Volumes, y.Volumes)) &&
		maps.Equal(x.Labels, y.Labels) && maps.Equal(x.Domains, y.Domains) &&
		(x.Allocatable == nil) == (y.Allocatable == nil) && maps.Equal(x.Allocatable, y.Allocatable)
}

// sameString reports whether a and b are the same string: one length and
// one backing array (or empty).
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// mapID is the identity of a map: the same for two values of one map, nil
// for a nil map. A map value is a pointer to the map (what reflect's
// Value.UnsafePointer returns for it), read here without reflect, which
// costs more than the rest of a node's comparison.
func mapID[K comparable, V any](m map[K]V) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&m))
}

// sameSlice reports whether a and b are the same slice: one length and,
// when not empty, one backing array from the same element.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// newQueueTree is split out so the adapter can validate queues alone.
func newQueueTree(qs []model.Queue) (*queue.Tree, error) {
	t, err := queue.New(qs)
	if err != nil {
		return nil, fmt.Errorf("building queues: %w", err)
	}
	return t, nil
}
