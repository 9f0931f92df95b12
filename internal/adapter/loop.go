package adapter

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/api/gpunode"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// loop runs scheduling cycles while it leads. It returns when ctx ends.
type loop struct {
	cfg     Config
	log     klog.Logger
	cache   *clusterCache
	core    *scheduler.Scheduler
	build   *builder
	binder  *binder
	api     clusterWriter
	status  statusSink
	metrics *metrics

	// partialSince remembers when a gang was first seen partly bound.
	partialSince map[string]time.Time
	// started is set by the first cycle, which resumes the gangs a
	// predecessor committed (binder.resume).
	started  bool
	diag     map[string]diagnosis
	queuesAt time.Time
	// nodeReported is what reportNodes last said of each node.
	nodeReported map[string]string
	// proposed holds the MIG proposals written to each node until the
	// cache shows them (miglayouts.go).
	proposed map[string][]gpunode.MIGProposalGPU
	// ungating holds the requests to lift pods' gates in flight (gates.go).
	ungating map[string]ungateAsk
	// usage is the queues' usage over time the last cycle returned
	// (model.Decisions.Usage), for the next snapshot; the first cycle
	// reads it back from the queues' status (usageovertime.go), where
	// queueStatus keeps it.
	usage     []model.QueueUsage
	usageRead bool
	// moves are the core's moves of the last hour (defrag.go).
	moves moveLog
}

func newLoop(cfg Config, log klog.Logger, c *clusterCache, api clusterWriter, st statusSink, m *metrics) (*loop, error) {
	core, err := scheduler.New(scheduler.Config{Policy: cfg.Policy, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("starting the scheduling core: %w", err)
	}
	return &loop{cfg: cfg, log: log, cache: c, core: core, build: newBuilder(cfg.SchedulerName, cfg.MaxEvictionsPerCycle, log),
		binder: newBinder(cfg, log, c, api, st, m), api: api, status: st, metrics: m, partialSince: map[string]time.Time{},
		moves: moveLog{perWindow: cfg.DefragMovesPerHour, drainAfter: cfg.DefragDrainAfter, maxLostWork: cfg.DefragMaxLostWork}}, nil
}

// run cycles until ctx ends: at once when the cache changes (batched by
// MinCycleInterval), at the latest every CycleInterval.
func (l *loop) run(ctx context.Context) {
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.cache.changes():
		case <-tick.C:
		}
		start := time.Now()
		if err := l.cycle(ctx, start); err != nil {
			l.log.Error(err, "scheduling cycle failed")
		}
		// Batch the changes that arrive meanwhile.
		wait := l.cfg.MinCycleInterval - time.Since(start)
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		if !tick.Stop() {
			select {
			case <-tick.C:
			default:
			}
		}
		tick.Reset(l.cfg.CycleInterval)
	}
}

// cycle is one pass: snapshot, core, actions, status.
func (l *loop) cycle(ctx context.Context, now time.Time) error {
	// 1. Snapshot: the cache's converted objects, the binder's waits.
	if !l.started {
		l.started = true
		l.binder.resume()
	}
	in := l.cache.snapshot(l.build, &l.binder.refusals, now)
	in.snap.Holds, in.snap.HoldTimeout = l.binder.holds.get(), maxPreemptionWait.Milliseconds()
	if !l.usageRead {
		l.usageRead = true
		var errs []error
		l.usage, errs = usageFromStatus(in.queueObjs, in.snap.Nodes, now)
		for _, err := range errs {
			l.log.Error(err, "ignoring a queue's usage over time")
		}
	}
	in.snap.Usage = l.usage
	in.snap.Layouts = layoutPolicy(l.cfg)
	in.snap.NodesMayBeAdded = l.cfg.NodeAutoscaler
	if l.cfg.NodeAutoscaler {
		in.snap.NodePools = l.cache.nodePools(l.build.poolClassLabels)
	}
	in.snap.Defrag = l.moves.policy()
	l.assumeLayouts(&in.snap)
	markRepartitioning(&in.snap)
	l.metrics.phase("snapshot", time.Since(now))
	l.binder.finishResumed(ctx, in)

	// 2. Core: decisions from the snapshot alone, with the reasons of
	//    the waiting groups it is asked to explain.
	if l.diag == nil {
		l.diag = map[string]diagnosis{}
	}
	l.askWhy(in)
	d, err := l.core.Cycle(&in.snap)
	if err != nil {
		l.metrics.attempts.WithLabelValues("error").Inc()
		return fmt.Errorf("running the core on %d nodes, %d pending groups: %w", len(in.snap.Nodes), len(in.snap.Pending), err)
	}
	for _, t := range d.Timings {
		l.metrics.phase(t.Phase, time.Duration(t.Nanos))
	}

	// 3. Evictions; the groups they are for wait for their victims (the
	//    core's holds) and are bound by a later cycle.
	t := time.Now()
	l.moves.record(d.Moves, in.snap.Now)
	l.binder.holds.set(d.Holds)
	l.usage = d.Usage
	l.binder.evict(ctx, in, &d)
	l.metrics.phase("evict", time.Since(t))

	// 4. Binds, whole groups at a time, concurrently.
	t = time.Now()
	placed := l.binder.bind(ctx, in, d.Binds)
	l.metrics.phase("bind-dispatch", time.Since(t))

	// 4b. MIG layouts proposed for idle GPUs, onto their nodes, where
	//     their agents apply them.
	l.writeLayouts(ctx, in, d.Layouts)

	// 4c. Gates: pods the core says wait for capacity are released, so
	//     that autoscalers see them; the others stay gated (gates.go).
	l.release(ctx, in, &d, placed)

	// 5. Gangs left partly bound are completed by the binds above or torn
	//    down once their grace is over.
	l.reconcilePartial(ctx, in, placed, now)

	// 6. Why-waiting, PodGroup and Queue status (rate-limited writes).
	t = time.Now()
	l.report(in, &d, placed)
	l.metrics.phase("status", time.Since(t))
	l.metrics.cycle(in, &d, placed, time.Since(now))
	l.log.V(2).Info("cycle", "nodes", len(in.snap.Nodes), "pending", len(in.snap.Pending), "binds", len(d.Binds),
		"evictions", len(d.Evictions), "unplaced", len(d.Unplaced), "took", time.Since(now))
	return nil
}

// reconcilePartial tears down gangs that stay partly bound: some pods
// bound, fewer than minMember, and the rest not placed for
// PartialGangGrace. Gangs found so when the scheduler starts leading (a
// predecessor died mid-gang) get the same grace: a node that is briefly
// tainted or a cache that is briefly behind must not cost a gang its
// running members.
func (l *loop) reconcilePartial(ctx context.Context, in *cycleInput, placed map[string]bool, now time.Time) {
	seen := map[string]bool{}
	for name, g := range in.groups {
		// Members that already finished count as placed: a gang whose
		// first pods completed is not half-placed.
		if g.pg == nil || len(g.pending) == 0 || len(g.bound) == 0 || len(g.bound)+len(g.finished) >= g.minMember || placed[name] {
			continue
		}
		// Only a gang gpuplane-scheduler placed is its to tear down: a
		// group under the scheduler-plugins label may hold pods another
		// scheduler bound, and those are never deleted here.
		if !l.boundByUs(g) {
			continue
		}
		seen[name] = true
		since, ok := l.partialSince[name]
		if !ok {
			since = now
			l.partialSince[name] = since
		}
		if now.Sub(since) < l.cfg.PartialGangGrace {
			continue
		}
		l.log.Info("deleting the bound pods of a partly bound gang that does not fit", "podGroup", g.pgKey, "bound", len(g.bound), "minMember", g.minMember)
		for _, pi := range g.bound {
			if pi.pod.DeletionTimestamp == nil {
				l.api.deletePod(ctx, pi.pod, fmt.Sprintf("gang %s is partly bound (%d/%d) and the rest does not fit", g.pgKey, len(g.bound), g.minMember))
			}
		}
		delete(l.partialSince, name)
	}
	for name := range l.partialSince {
		if !seen[name] {
			delete(l.partialSince, name)
		}
	}
}

// boundByUs reports whether every bound member of g names this scheduler.
func (l *loop) boundByUs(g *groupInfo) bool {
	for _, pi := range g.bound {
		if pi.pod.Spec.SchedulerName != l.cfg.SchedulerName {
			return false
		}
	}
	return true
}

func joinReasons(m map[string]int, order []string) string {
	var parts []string
	for _, k := range order {
		if n := m[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(parts, ", ")
}
