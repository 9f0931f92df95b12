package scheduler

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// Config configures a Scheduler.
type Config struct {
	// Policy names the placement policy (placement.NewPolicy); empty
	// means "gpuplane".
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

type applied struct {
	node   int
	req    model.Request
	shares []model.GPUShare
}

// Scheduler runs cycles. It keeps the cluster's free state between cycles
// and applies only what changed in each new snapshot (an incremental
// snapshot), so a cycle's cost follows the pending work, not the cluster.
// A Scheduler is not safe for concurrent use.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	nodes   []model.Node
	index   map[string]int
	st      *placement.State
	placer  *placement.Placer
	running map[string]applied
}

// New returns a scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Policy == "" {
		cfg.Policy = "gpuplane"
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

// State exposes the free state after the last cycle (read-only use).
func (s *Scheduler) State() *placement.State { return s.st }

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
	// 3. Allocate: place whole groups queue by queue, fairest first.
	c.allocate()
	t.phase("allocate")
	// 4. Backfill: fill holes without taking a blocked head's reservation.
	c.backfill()
	t.phase("backfill")
	// 5. Preempt: within a queue, by strictly higher priority.
	c.evictFor(false)
	t.phase("preempt")
	// 6. Reclaim: across queues, up to the reclaimer's fair share, else
	//    within its GPU guarantee.
	c.evictFor(true)
	t.phase("reclaim")
	// 7. Record what stays pending and keep the plan in our state.
	c.finish()
	t.phase("finish")
	s.log.Debug("scheduling cycle", "binds", len(d.Binds), "evictions", len(d.Evictions), "unplaced", len(d.Unplaced))
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

func sameNodes(a, b []model.Node) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.MilliCPU != y.MilliCPU || x.MemoryMiB != y.MemoryMiB || x.Unschedulable != y.Unschedulable ||
			!slices.Equal(x.GPUs, y.GPUs) || !slices.Equal(x.Taints, y.Taints) || len(x.Labels) != len(y.Labels) {
			return false
		}
		for k, v := range x.Labels {
			if y.Labels[k] != v {
				return false
			}
		}
	}
	return true
}

func (s *Scheduler) sync(snap *model.Snapshot) error {
	if s.st == nil || !sameNodes(s.nodes, snap.Nodes) {
		s.nodes = slices.Clone(snap.Nodes)
		s.index = make(map[string]int, len(s.nodes))
		for i := range s.nodes {
			if _, dup := s.index[s.nodes[i].Name]; dup {
				return fmt.Errorf("syncing snapshot: node %q listed twice", s.nodes[i].Name)
			}
			s.index[s.nodes[i].Name] = i
		}
		s.st = placement.NewState(s.nodes)
		s.running = map[string]applied{}
		targets := s.cfg.Targets
		if len(targets) == 0 {
			targets = targetsOf(snap)
		}
		pol, err := placement.NewPolicy(s.cfg.Policy, placement.PolicyEnv{Targets: targets, Seed: s.cfg.Seed})
		if err != nil {
			return fmt.Errorf("syncing snapshot: %w", err)
		}
		if s.placer, err = placement.NewPlacer(s.st, pol); err != nil {
			return fmt.Errorf("syncing snapshot: %w", err)
		}
	}
	seen := make(map[string]bool, len(snap.Running))
	for i := range snap.Running {
		a := &snap.Running[i]
		if seen[a.Pod] {
			return fmt.Errorf("syncing snapshot: pod %q is running twice", a.Pod)
		}
		seen[a.Pod] = true
		n, ok := s.index[a.Node]
		if !ok {
			return fmt.Errorf("syncing snapshot: pod %q runs on unknown node %q", a.Pod, a.Node)
		}
		if old, ok := s.running[a.Pod]; ok {
			if old.node == n && slices.Equal(old.shares, a.GPUs) && old.req.MilliCPU == a.Request.MilliCPU && old.req.MemoryMiB == a.Request.MemoryMiB {
				continue
			}
			s.st.Release(old.node, &old.req, old.shares)
			delete(s.running, a.Pod)
		}
		if err := s.st.Assign(n, &a.Request, a.GPUs); err != nil {
			return fmt.Errorf("syncing snapshot: pod %q: %w (the snapshot over-allocates the node)", a.Pod, err)
		}
		s.running[a.Pod] = applied{node: n, req: a.Request, shares: slices.Clone(a.GPUs)}
	}
	for pod, old := range s.running {
		if !seen[pod] {
			s.st.Release(old.node, &old.req, old.shares)
			delete(s.running, pod)
		}
	}
	s.st.Commit()
	return nil
}

func targetsOf(snap *model.Snapshot) []placement.Target {
	var reqs []model.Request
	for i := range snap.Pending {
		for _, p := range snap.Pending[i].Pods {
			reqs = append(reqs, p.Request)
		}
	}
	for i := range snap.Running {
		reqs = append(reqs, snap.Running[i].Request)
	}
	if ts, err := placement.TargetsFrom(reqs, 1); err == nil {
		return ts
	}
	return []placement.Target{{Req: model.Request{GPUs: 1}, P: 1}}
}

// capacityOf sums the cluster's resources.
func capacityOf(nodes []model.Node) model.Resources {
	var c model.Resources
	for i := range nodes {
		c.MilliCPU += nodes[i].MilliCPU
		c.MemoryMiB += nodes[i].MemoryMiB
		for _, g := range nodes[i].GPUs {
			c.GPUMilli += g.Capacity()
		}
	}
	return c
}

// newQueueTree is split out so the adapter can validate queues alone.
func newQueueTree(qs []model.Queue) (*queue.Tree, error) {
	t, err := queue.New(qs)
	if err != nil {
		return nil, fmt.Errorf("building queues: %w", err)
	}
	return t, nil
}
