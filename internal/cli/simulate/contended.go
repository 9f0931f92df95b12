package simulate

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/simulator"
)

// runContended generates a contended workload per seed and runs the
// scheduler configurations (or placement policies) on it.
func runContended(cmd *cobra.Command, o *options, mode simulator.Mode) error {
	if o.workload != "contended" {
		return cliutil.Usagef("--workload %q: want contended", o.workload)
	}
	if o.trace != "" {
		return cliutil.Usagef("--workload and --trace: give one")
	}
	if mode != simulator.ModeEvent {
		return cliutil.Usagef("--workload contended runs in --mode event only")
	}
	seeds, err := ParseSeeds(o.seeds)
	if err != nil {
		return err
	}
	if o.parallel < 1 {
		return cliutil.Usagef("--parallel must be >= 1, got %d", o.parallel)
	}
	maxRun, err := traceSeconds("max-run-time", o.maxRunTime)
	if err != nil {
		return err
	}
	loss, err := o.spot.loss(mode)
	if err != nil {
		return err
	}
	maxLostWork, err := traceSeconds("defrag-max-lost-work", o.defragMaxLostWork)
	if err != nil {
		return err
	}
	var configs []simulator.SchedulerConfig
	var policies []string
	if o.configs != "" {
		if configs, err = simulator.ParseSchedulerConfigs(o.configs); err != nil {
			return cliutil.Usagef("--config: %v", err)
		}
	} else {
		for p := range strings.SplitSeq(o.policies, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			if _, err := placement.NewPolicy(p, placement.PolicyEnv{Targets: []placement.Target{{P: 1}}}); err != nil {
				return cliutil.Usagef("--policy: %v", err)
			}
			policies = append(policies, p)
		}
	}
	spec := simulator.DefaultContendedSpec(0)
	spec.Load, spec.Nodes, spec.Hours, spec.MaxRunTime = o.load, o.nodes, o.hours, maxRun
	spec.CheckpointShare, spec.MovableShare = o.checkpointShare, o.movableShare
	if o.teams != "" {
		if spec.Teams, err = simulator.ParseTeams(o.teams); err != nil {
			return cliutil.Usagef("--teams: %v", err)
		}
	}
	if err := spec.Validate(); err != nil {
		return cliutil.Usagef("--workload contended: %v (flags --load, --nodes, --hours, --teams, --max-run-time, --checkpoint-share, --movable-share)", err)
	}
	tables, err := simulator.BuiltinWorkloadTables()
	if o.workloadTraces != "" {
		tables, err = simulator.ReadWorkloadTables(o.workloadTraces, 0)
	}
	if err != nil {
		return err
	}
	gen := func(seed uint64) (*simulator.Trace, error) {
		s := spec
		s.Seed = seed
		return simulator.GenerateContended(tables, s)
	}
	source := fmt.Sprintf("contended (%d nodes, %d h, peak load %g)", spec.Nodes, spec.Hours, spec.Load)
	prog := newProgress(cmd.ErrOrStderr(), source)
	results, err := simulator.RunAll(cmd.Context(), nil, simulator.Spec{
		Mode: mode, Policies: policies, Configs: configs, Seeds: seeds, Generate: gen,
		Parallel: o.parallel, Progress: prog.update, Popularity: 1, NodeLoss: loss,
		Defrag: model.DefragPolicy{MaxLostWork: maxLostWork},
	})
	prog.finish()
	if err != nil {
		return err
	}
	return report(cmd, o, mode, source, results, true)
}

// printEventSummary prints each configuration's means over seeds, then
// its queues'.
func printEventSummary(w io.Writer, results []*simulator.Result) error {
	sums := simulator.SummarizeEvent(results)
	t := cliutil.NewTable(w)
	fmt.Fprintln(t, "CONFIG\tRUNS\tJOBS\tDONE\tJCT MEAN\tJCT P50\tJCT P95\tWAIT P50\tWAIT P95\tFAIRNESS DEV\tJAIN(T)\tPREEMPTIONS\tLOST GPU-H\tMOVES\tLOST BY MOVES\tMEAN ALLOC\tWHOLE-NODE JOBS\tWHOLE-NODE WAIT P95")
	for _, s := range sums {
		fmt.Fprintf(t, "%s\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.0f\t%.1f\t%.0f\t%.1f\t%.1f%%\t%.1f\t%s\n", s.Policy, s.Runs, s.Jobs, s.JobsCompleted,
			dur(s.JCTMean), dur(s.JCTP50), dur(s.JCTP95), dur(s.WaitP50), dur(s.WaitP95), s.FairnessDeviation, s.JainOverTime,
			s.Preemptions, s.LostGPUHours, s.Moves, s.LostGPUHoursMoves, 100*s.MeanUtilization, s.WholeNodeJobs, dur(s.WholeNodeWaitP95))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = cliutil.NewTable(w)
	fmt.Fprintln(t, "CONFIG\tQUEUE\tJOBS\tJCT MEAN\tJCT P50\tJCT P95\tWAIT P50\tWAIT P95\tSHARE\tENTITLED\tFAIRNESS DEV\tPREEMPTED\tLOST GPU-H")
	for _, s := range sums {
		for _, q := range s.Queues {
			fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%d\t%.1f\n", s.Policy, q.Queue, q.Jobs,
				dur(q.JCTMean), dur(q.JCTP50), dur(q.JCTP95), dur(q.WaitP50), dur(q.WaitP95), q.Share, q.Entitlement, q.FairnessDeviation, q.Preemptions, q.LostGPUHours)
		}
	}
	return t.Flush()
}

// dur prints trace seconds for people: 45s, 12m, 3.2h.
func dur(sec float64) string {
	switch {
	case sec < 120:
		return fmt.Sprintf("%.0fs", sec)
	case sec < 2*3600:
		return fmt.Sprintf("%.0fm", sec/60)
	}
	return fmt.Sprintf("%.1fh", sec/3600)
}
