package simulator

import (
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// SchedulerConfig is a configuration of gpuplane's scheduling core that
// behaves like another scheduler, so that event mode compares policies on
// one workload with one core making every decision: a placement policy and
// how the trace's teams become the core's queues. It adds no scheduler of
// its own.
type SchedulerConfig struct {
	Name string
	// Placement names the placement policy (placement.NewPolicy).
	Placement string
	// About says what the configuration stands for and what of it the
	// core cannot express.
	About string
	// OneQueue puts every team's work in one queue, with neither a
	// guarantee nor preemption: first come, first served, as
	// kube-scheduler serves pods.
	OneQueue bool
	// IgnorePriority gives every group priority 0.
	IgnorePriority bool
	// EqualWeights gives every queue weight 1 instead of the trace's.
	EqualWeights bool
	// NoPreemption and NoReclaim turn the core's eviction actions off on
	// every queue.
	NoPreemption, NoReclaim bool
	// UsageHalfLife, when positive, gives every queue fair shares that
	// follow usage over time (model.Queue.UsageHalfLife), in trace
	// seconds.
	UsageHalfLife int64
	// VictimsByAge chooses victims by priority, then age, blind to
	// checkpoints (model.Snapshot.VictimsByAge).
	VictimsByAge bool
	// MinRuntime, when positive, is every queue's minimum runtime
	// (model.Queue.MinRuntime), in trace seconds.
	MinRuntime int64
	// DefragMovesPerHour, when positive, lets the core move this many
	// Movable groups in any hour of the trace (model.DefragPolicy), as
	// gpuplane-scheduler's --defrag-moves-per-hour; it replaces the run's
	// own.
	DefragMovesPerHour int
	// DefragDrainAfter, with DefragMovesPerHour, is how long in trace
	// seconds a group that needs whole nodes waits before the core drains
	// nodes for it (model.DefragPolicy.DrainAfter), as gpuplane-scheduler's
	// --defrag-drain-after; 0 drains none.
	DefragDrainAfter int64
}

// The configurations event mode compares (docs/benchmarks-scheduler.md).
var schedulerConfigs = []SchedulerConfig{
	{
		Name: "fifo-bestfit", Placement: "bestfit", OneQueue: true, IgnorePriority: true, NoPreemption: true, NoReclaim: true,
		About: "kube-scheduler's behaviour: one queue in arrival order, later groups fill what the head leaves (the core keeps the head's nodes, kube-scheduler does not), best fit, no preemption; gangs stay whole (coscheduling)",
	},
	{
		Name: "gpuplane", Placement: "bestfit", UsageHalfLife: 3600, DefragMovesPerHour: 10, DefragDrainAfter: 3600,
		About: "gpuplane's recommended policies: a queue per team weighted by its guarantee, weighted DRF over usage with a 1-hour half-life, reclaim of fair share and guarantee, preemption within a queue, victims that lose the fewest GPU-hours, up to 10 moves an hour of movable jobs for gangs that wait for scattered GPUs, a node drained (kept from new work, its movable jobs moved off last) for a gang that has waited an hour for whole nodes, best-fit placement; no minimum runtime",
	},
	{
		Name: "gpuplane-by-age", Placement: "bestfit", UsageHalfLife: 3600, DefragMovesPerHour: 10, DefragDrainAfter: 3600, VictimsByAge: true,
		About: "gpuplane with victims chosen by priority, then age, blind to checkpoints (the core's choice before checkpoint-aware victims), everything else as gpuplane",
	},
	{
		Name: "gpuplane-no-defrag", Placement: "bestfit", UsageHalfLife: 3600,
		About: "gpuplane without defragmentation (no moves, no drains), everything else as gpuplane",
	},
	{
		Name: "gpuplane-plain", Placement: placement.DefaultPolicy,
		About: "gpuplane's defaults: weighted DRF over current usage, no moves, fgd-packing placement, victims that lose the fewest GPU-hours",
	},
	{
		Name: "kai-like", Placement: "bestfit", EqualWeights: true, UsageHalfLife: 600,
		About: "KAI's defaults: deserved quota = the team's guarantee, over-quota weight 1, no limit, reclaim and preemption, binpack (best fit); time-based fairshare with KAI's documented halfLifePeriod of 10m (the core's usage half-life; KAI's windowSize has no counterpart)",
	},
	{
		Name: "kueue-like", Placement: "spread", EqualWeights: true,
		About: "Kueue's BestEffortFIFO ClusterQueues in one cohort: nominal quota = the team's guarantee, borrowing without limit, reclaimWithinCohort Any, withinClusterQueue LowerPriority, kube-scheduler's LeastAllocated (spread); the core still orders queues by dominant share and reclaims fair share too, which Kueue without fair sharing does not",
	},
}

// SchedulerConfigs are the configurations event mode can compare.
func SchedulerConfigs() []SchedulerConfig { return schedulerConfigs }

// SchedulerConfigNames are their names.
func SchedulerConfigNames() []string {
	var out []string
	for _, c := range schedulerConfigs {
		out = append(out, c.Name)
	}
	return out
}

// ParseSchedulerConfigs parses a comma-separated list of configuration
// names.
func ParseSchedulerConfigs(s string) ([]SchedulerConfig, error) {
	var out []SchedulerConfig
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		found := false
		for _, c := range schedulerConfigs {
			if c.Name == name {
				out, found = append(out, c), true
			}
		}
		if !found {
			return nil, fmt.Errorf("%q: want one of %s", name, strings.Join(SchedulerConfigNames(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no configuration named (want some of %s)", strings.Join(SchedulerConfigNames(), ", "))
	}
	return out, nil
}

// oneQueue is the queue OneQueue puts everything in.
const oneQueue = "all"

// queues are the core's queues for the trace's.
func (c *SchedulerConfig) queues(qs []model.Queue) []model.Queue {
	if c == nil {
		return qs
	}
	if c.OneQueue {
		return []model.Queue{{Name: oneQueue, NoPreemption: c.NoPreemption, NoReclaim: c.NoReclaim}}
	}
	out := make([]model.Queue, len(qs))
	for i, q := range qs {
		if c.EqualWeights {
			q.Weight, q.Weights = 1, model.ResourceWeights{}
		}
		q.NoPreemption = q.NoPreemption || c.NoPreemption
		q.NoReclaim = q.NoReclaim || c.NoReclaim
		if c.UsageHalfLife > 0 {
			q.UsageHalfLife = c.UsageHalfLife
		}
		if c.MinRuntime > 0 {
			q.MinRuntime = c.MinRuntime
		}
		out[i] = q
	}
	return out
}

// queueOf is the core's queue of a trace queue.
func (c *SchedulerConfig) queueOf(q string) string {
	if c != nil && c.OneQueue {
		return oneQueue
	}
	return q
}

func (c *SchedulerConfig) priority(p int32) int32 {
	if c != nil && c.IgnorePriority {
		return 0
	}
	return p
}
