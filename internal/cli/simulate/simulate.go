package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/simulator"
)

type options struct {
	trace, variant, mode, policies, seeds, out, mix string
	output                                          *cliutil.Format
	tune, popularity                                float64
	tunedLast, keepNodeOrder                        bool
	parallel, replicas                              int
	// Topology: the nodes' layout, a generated training workload and
	// who places gangs by the network.
	layout, trainingSizes, topologyPolicies string
	training                                int
	trainingRequired, trainingLoad          float64
	trainingSeed                            uint64
	trainingStart                           int64
	// MIG layouts that follow demand: durations, as gpuplane-scheduler
	// takes them, run in whole seconds of the trace's clock.
	migMinWait, migDwell, migTimeout, migDelay time.Duration
	migMaxPerNode                              int
	// A generated contended workload (--workload contended) and the
	// scheduler configurations compared on it.
	workload, workloadTraces, teams, configs string
	load                                     float64
	nodes, hours                             int
	maxRunTime                               time.Duration
	checkpointShare, movableShare            float64
	// defragMoves is gpuplane-scheduler's --defrag-moves-per-hour, in
	// hours of the trace's clock.
	defragMoves int
	// defragDrainAfter is gpuplane-scheduler's --defrag-drain-after, on
	// the trace's clock.
	defragDrainAfter time.Duration
	// defragMaxLostWork is gpuplane-scheduler's --defrag-max-lost-work.
	defragMaxLostWork time.Duration
	// spot: nodes reclaimed in event mode (nodeloss.go).
	spot nodeLossFlags
}

// NewCommand returns the simulate command.
func NewCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a cluster trace through the scheduler and compare placement policies",
		Long: `simulate replays a trace through gpuplane's scheduling core on a virtual clock.

--trace DIR --variant NAME reads the Alibaba openb trace
(DIR/openb_node_list_gpu_node.csv and DIR/openb_pod_list_NAME.csv);
--trace FILE.yaml reads gpuplane's own small YAML trace format.

--mode packing is the FGD paper's experiment: the trace is tuned to --tune
times the cluster's GPU capacity with pods drawn at random (seeded), pods
arrive one by one and stay, a pod that fits nowhere fails. It reports the
milli-GPU allocation ratio (allocated/total), the share of GPUs in use,
failed pods and fragmentation, at the end and as demand arrives.

--mode event replays arrivals and departures through full scheduling cycles
(queues, gangs, preemption) and reports queueing delay, completion time,
utilization and fairness.

--workload contended (in place of --trace, event mode) generates, for each
seed, a contended multi-tenant workload: openb's machines and GPU pod
shapes, Philly's run times, the Alibaba 2025 trace's gangs, roles, RDMA and
daily arrival profile, several teams' queues with guarantees and bursts,
and --load times the cluster's GPUs offered in the busiest hour
(docs/simulator.md). --config runs scheduler configurations of the core on
it (fifo-bestfit, gpuplane and its variants gpuplane-by-age,
gpuplane-no-defrag and gpuplane-plain, kai-like, kueue-like) and reports per
configuration and queue job completion time, queueing delay, fairness over
time, preemptions, GPU-hours lost to preemption, moves, and the wait of jobs
that need a whole node.

Spot nodes (event mode). --spot-fraction F --spot-reclaim-per-hour R makes
F of the nodes spot instances (picked by seed) that the provider reclaims
at R per node-hour in service (seeded): a reclaimed node gives
--spot-notice of notice, in which the core requeues its gangs whole or
shrinks its elastic groups, then goes, and comes back after
--spot-return-after. Nodes lost, pods and gangs hit and GPU-hours lost to
node loss are reported apart from preemption's.

Topology. --layout nodes-per-rack=N,racks-per-block=M lays the trace's
nodes out in racks and blocks (labels gpuplane.io/rack and gpuplane.io/block;
alike machines share racks). --training JOBS adds a multi-node training
workload: job sizes from --training-sizes (default Philly's, as Gavel draws
it), one pod per node of the trace's most common largest machine, gangs
that prefer a rack (--training-required of them require one). In event
mode --topology-policy runs each policy with gangs placed by gpuplane's
core (aware), with their topology stripped (blind), and by a baseline
outside the core that follows Kueue's Topology Aware Scheduling
(kueue-tas), and reports per run the share of gangs inside one domain of
their required and preferred level, domains spanned, GPU allocation and
gang wait.`,
		Example: `  gpuplane simulate --trace ../shared/traces/openb --variant default --policy fgd,bestfit,gpuplane --seeds 1-10 --out results/
  gpuplane simulate --trace cluster.yaml --mode event -o json
  gpuplane simulate --workload contended --mode event --config fifo-bestfit,gpuplane,gpuplane-by-age,gpuplane-no-defrag,kai-like,kueue-like --seeds 1-10
  gpuplane simulate --workload contended --mode event --config gpuplane --spot-fraction 0.5 --spot-reclaim-per-hour 0.05
  gpuplane simulate --trace ../shared/traces/openb --mode event --layout nodes-per-rack=8,racks-per-block=8 \
    --training 1000 --training-start 9936000 --topology-policy aware,blind,kueue-tas`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.trace, "trace", "", "trace directory (openb CSV) or YAML trace file (required)")
	f.StringVar(&o.variant, "variant", "default", "openb pod list variant: default, gpushare20..100, multigpu20..50")
	f.StringVar(&o.mode, "mode", "packing", "packing or event")
	f.IntVar(&o.replicas, "replicas", 0, "share every GPU as this many time-slicing or MPS replicas, as a Kubernetes node does: a share takes at least 1/N of its GPU and a GPU holds at most N pods (0: shares as the trace states them)")
	f.StringVar(&o.mix, "mix", "", "reshape the workload by kind of pod before the run, e.g. cpu-only=3,share=0.5 (kinds: cpu-only, share, whole, multi-gpu; factor 0 removes a kind)")
	f.StringVar(&o.policies, "policy", placement.DefaultPolicy, "comma-separated placement policies: "+strings.Join(placement.PolicyNames(), ", ")+", or custom:plugin=weight,...")
	f.StringVar(&o.seeds, "seeds", "1", "seeds: a list and/or ranges, for example 1-10 or 1,3,5")
	f.Float64Var(&o.tune, "tune", 1.3, "packing: tune arrived GPU demand to this multiple of capacity (0 keeps the trace as is)")
	f.BoolVar(&o.tunedLast, "tuned-last", false, "packing: drawn pods arrive after the trace instead of before it")
	f.BoolVar(&o.keepNodeOrder, "keep-node-order", false, "packing: place on nodes in trace order instead of a per-seed permutation")
	f.Float64Var(&o.popularity, "popularity", 1, "share of pods whose types FGD measures fragmentation against (0..1]")
	cliutil.DurationVar(cmd, &o.migMinWait, "mig-demand-min-wait", 10*time.Second, "event mode, nodes with migProfiles: how long pending MIG or whole-GPU demand waits before an idle GPU is re-partitioned for it, as gpuplane-scheduler's flag (whole seconds; a bare number of seconds is deprecated)")
	cliutil.DurationVar(cmd, &o.migDwell, "mig-layout-dwell", 300*time.Second, "event mode: how long a GPU proposed for is left alone, as gpuplane-scheduler's flag (whole seconds; a bare number of seconds is deprecated)")
	cliutil.DurationVar(cmd, &o.migTimeout, "mig-proposal-timeout", 120*time.Second, "event mode: how long an unapplied proposal holds its node, as gpuplane-scheduler's flag (whole seconds; a bare number of seconds is deprecated)")
	f.IntVar(&o.migMaxPerNode, "mig-max-proposals-per-node", 1, "event mode: GPUs of one node proposed for per cycle")
	f.IntVar(&o.defragMoves, "defrag-moves-per-hour", 0, "event mode: running groups that opted in (trace pods' movable) the core may move in any hour of the trace to gather scattered GPUs for a waiting gang, as gpuplane-scheduler's flag; 0 moves none")
	cliutil.DurationVar(cmd, &o.defragDrainAfter, "defrag-drain-after", 0, "event mode, with --defrag-moves-per-hour: how long a gang whose pods need whole nodes waits before the core drains nodes for it (keeps new work off the nodes cheapest to empty, moves their movable work off once nothing else is left), as gpuplane-scheduler's flag; 0 drains none (whole seconds)")
	cliutil.DurationVar(cmd, &o.defragMaxLostWork, "defrag-max-lost-work", 0, "event mode: the most work a move may throw away, as gpuplane-scheduler's flag: a job is moved only within this long of its last checkpoint (trace pods' checkpointEvery) or, with none, of its start; with --config, for the configurations that move; 0 bounds nothing (whole seconds)")
	cliutil.DurationVar(cmd, &o.migDelay, "mig-layout-delay", 5*time.Second, "event mode: how long a node takes to re-partition a GPU once proposed (whole seconds; a bare number of seconds is deprecated)")
	f.StringVar(&o.layout, "layout", "", "lay the nodes out in racks and blocks: nodes-per-rack=N[,racks-per-block=M] (labels gpuplane.io/rack, gpuplane.io/block; alike machines share racks)")
	f.IntVar(&o.training, "training", 0, "add this many multi-node training jobs: one pod per node of the trace's most common largest machine, gangs placed by rack (needs racks: --layout or the trace's own)")
	f.StringVar(&o.trainingSizes, "training-sizes", "1:70,2:10,4:15,8:5", "training job sizes in pods (nodes) as PODS:WEIGHT,...; the default is Philly's job-size histogram as Gavel draws it")
	f.Float64Var(&o.trainingRequired, "training-required", 0.2, "share of training gangs that one rack can hold that require a rack; the others prefer one")
	f.Float64Var(&o.trainingLoad, "training-load", 0.8, "training jobs' offered load: their GPU-time over the GPU capacity of the machines they use, over their arrival span")
	f.Int64Var(&o.trainingStart, "training-start", -1, "trace second the training jobs start arriving at (-1: the trace's first arrival)")
	f.Uint64Var(&o.trainingSeed, "training-seed", 1, "seed of the generated training jobs (the same trace for every run)")
	f.StringVar(&o.topologyPolicies, "topology-policy", string(simulator.TopologyAware), "event mode: who places gangs by the network, comma-separated: "+strings.Join(simulator.TopologyPolicyNames(), ", ")+" (kueue-tas is a baseline outside gpuplane's core following Kueue's Topology Aware Scheduling)")
	f.StringVar(&o.workload, "workload", "", "generate the workload instead of reading --trace: contended (event mode; one workload per seed)")
	f.StringVar(&o.workloadTraces, "workload-traces", "", "contended: distill the workload's tables from this traces directory (../shared/traces) instead of the tables built in")
	f.Float64Var(&o.load, "load", 1.5, "contended: offered load of the busiest hour, a multiple of the cluster's GPUs (1.2-2 contends)")
	f.IntVar(&o.nodes, "nodes", 48, "contended: machines in the cluster, in openb's mix")
	f.IntVar(&o.hours, "hours", 24, "contended: hours over which jobs arrive")
	f.StringVar(&o.teams, "teams", "", "contended: teams as NAME:GUARANTEE:DEMAND,... (shares of GPUs and of jobs; default team-a:0.4:0.25,team-b:0.3:0.3,team-c:0.2:0.25,team-d:0.1:0.2)")
	cliutil.DurationVar(cmd, &o.maxRunTime, "max-run-time", 12*time.Hour, "contended: longest run time drawn from Philly's (whole seconds)")
	f.Float64Var(&o.checkpointShare, "checkpoint-share", 0.6, "contended: share of the jobs that checkpoint (every 10, 30 or 60 minutes); the others lose their whole run when evicted")
	f.Float64Var(&o.movableShare, "movable-share", 0.5, "contended: share of the checkpointing jobs that opt in to moves for defragmentation")
	f.StringVar(&o.configs, "config", "", "event mode: scheduler configurations of the core to compare, in place of --policy: "+strings.Join(simulator.SchedulerConfigNames(), ", "))
	f.IntVar(&o.parallel, "parallel", min(2, runtime.NumCPU()), "runs to execute at once")
	f.StringVar(&o.out, "out", "", "directory for results.csv, curve.csv and plot.svg")
	o.spot.add(cmd)
	o.output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds a row per run, json one object per run (policy and seed), yaml one document per run")
	return cmd
}

// ParseSeeds parses "1-10", "1,3,5" or a mix.
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, cliutil.Usagef("--seeds %q: %q is not a seed (want for example 1-10 or 1,3,5)", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, cliutil.Usagef("--seeds %q: %q is not a range (want LOW-HIGH with LOW <= HIGH)", s, part)
			}
			if b-a > 10000 {
				return nil, cliutil.Usagef("--seeds %q: range %q is too long (at most 10001 seeds)", s, part)
			}
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, cliutil.Usagef("--seeds %q: no seeds", s)
	}
	return out, nil
}

func run(cmd *cobra.Command, o *options) error {
	mode := simulator.Mode(o.mode)
	if mode != simulator.ModePacking && mode != simulator.ModeEvent {
		return cliutil.Usagef("--mode %q: want packing or event", o.mode)
	}
	if o.workload != "" {
		return runContended(cmd, o, mode)
	}
	if o.trace == "" {
		return cliutil.Usagef("--trace is required (an openb directory or a YAML trace file), or --workload contended")
	}
	var configs []simulator.SchedulerConfig
	if o.configs != "" {
		if mode != simulator.ModeEvent {
			return cliutil.Usagef("--config: scheduler configurations run in --mode event only")
		}
		var err error
		if configs, err = simulator.ParseSchedulerConfigs(o.configs); err != nil {
			return cliutil.Usagef("--config: %v", err)
		}
	}
	seeds, err := ParseSeeds(o.seeds)
	if err != nil {
		return err
	}
	if o.tune < 0 {
		return cliutil.Usagef("--tune must be >= 0, got %g", o.tune)
	}
	var layoutSeconds [4]int64
	for i, d := range []struct {
		flag string
		v    time.Duration
	}{{"mig-demand-min-wait", o.migMinWait}, {"mig-layout-dwell", o.migDwell}, {"mig-proposal-timeout", o.migTimeout}, {"mig-layout-delay", o.migDelay}} {
		if layoutSeconds[i], err = traceSeconds(d.flag, d.v); err != nil {
			return err
		}
	}
	if o.defragMoves < 0 {
		return cliutil.Usagef("--defrag-moves-per-hour must be >= 0, got %d", o.defragMoves)
	}
	drainAfter, err := traceSeconds("defrag-drain-after", o.defragDrainAfter)
	if err != nil {
		return err
	}
	maxLostWork, err := traceSeconds("defrag-max-lost-work", o.defragMaxLostWork)
	if err != nil {
		return err
	}
	loss, err := o.spot.loss(mode)
	if err != nil {
		return err
	}
	if o.migMaxPerNode < 1 || o.migMaxPerNode > 64 {
		return cliutil.Usagef("--mig-max-proposals-per-node must be 1 to 64, got %d", o.migMaxPerNode)
	}
	if o.popularity <= 0 || o.popularity > 1 {
		return cliutil.Usagef("--popularity must be in (0,1], got %g", o.popularity)
	}
	if o.parallel < 1 {
		return cliutil.Usagef("--parallel must be >= 1, got %d", o.parallel)
	}
	if o.replicas < 0 || o.replicas > gpunode.MaxReplicas {
		return cliutil.Usagef("--replicas must be 0 to %d, got %d", gpunode.MaxReplicas, o.replicas)
	}
	var policies []string
	for p := range strings.SplitSeq(o.policies, ";") {
		for q := range strings.SplitSeq(p, ",") {
			// custom:a=1,b=2 keeps its commas: glue weight parts back on.
			if len(policies) > 0 && strings.HasPrefix(policies[len(policies)-1], "custom:") && strings.Contains(q, "=") {
				policies[len(policies)-1] += "," + q
				continue
			}
			if q = strings.TrimSpace(q); q != "" {
				policies = append(policies, q)
			}
		}
	}
	if len(policies) == 0 {
		return cliutil.Usagef("--policy: no policies given")
	}
	for _, p := range policies {
		// Validate names before reading the trace.
		if _, err := placement.NewPolicy(p, placement.PolicyEnv{Targets: []placement.Target{{P: 1}}}); err != nil {
			return cliutil.Usagef("--policy: %v", err)
		}
	}
	mix, err := simulator.ParseMix(o.mix)
	if err != nil {
		return cliutil.Usagef("--mix: %v", err)
	}
	layout, err := simulator.ParseLayout(o.layout)
	if err != nil {
		return cliutil.Usagef("--layout: %v", err)
	}
	topoPolicies, err := simulator.ParseTopologyPolicies(o.topologyPolicies)
	if err != nil {
		return cliutil.Usagef("--topology-policy: %v", err)
	}
	if mode != simulator.ModeEvent && (len(topoPolicies) > 1 || topoPolicies[0] != simulator.TopologyAware) {
		return cliutil.Usagef("--topology-policy: gangs are placed by the network in --mode event only")
	}
	var training simulator.TrainingSpec
	if o.training != 0 {
		sizes, err := simulator.ParseSizes(o.trainingSizes)
		if err != nil {
			return cliutil.Usagef("--training-sizes: %v", err)
		}
		training = simulator.TrainingSpec{Jobs: o.training, Sizes: sizes, RequiredShare: o.trainingRequired, Load: o.trainingLoad, Seed: o.trainingSeed, Start: o.trainingStart}
		if o.training < 0 {
			return cliutil.Usagef("--training must be >= 0, got %d", o.training)
		}
		if o.trainingRequired < 0 || o.trainingRequired > 1 {
			return cliutil.Usagef("--training-required must be in [0,1], got %g", o.trainingRequired)
		}
		if !(o.trainingLoad > 0) || o.trainingLoad > 100 {
			return cliutil.Usagef("--training-load must be in (0,100], got %g", o.trainingLoad)
		}
	}
	tr, err := readTrace(o.trace, o.variant)
	if err != nil {
		return err
	}
	if mix != simulator.NoMix {
		tr.Pods = mix.Apply(tr.Pods, 1)
		tr.Source += " (" + mix.String() + ")"
	}
	tr.ShareAsReplicas(o.replicas)
	layout.Apply(tr)
	if training.Jobs > 0 {
		if _, err := simulator.AddTraining(tr, training); err != nil {
			return err
		}
	}
	if mode != simulator.ModeEvent {
		topoPolicies = nil
	}
	stderr := cmd.ErrOrStderr()
	prog := newProgress(stderr, tr.Source)
	results, err := simulator.RunAll(cmd.Context(), tr, simulator.Spec{
		Mode: mode, Policies: policies, Seeds: seeds, Tune: o.tune, TunedLast: o.tunedLast, KeepNodeOrder: o.keepNodeOrder,
		Popularity: o.popularity, Parallel: o.parallel, Progress: prog.update, TopologyPolicies: topoPolicies, Configs: configs,
		Layouts:     model.LayoutPolicy{MinWait: layoutSeconds[0], Dwell: layoutSeconds[1], Timeout: layoutSeconds[2], MaxPerNode: o.migMaxPerNode},
		LayoutDelay: layoutSeconds[3],
		Defrag:      model.DefragPolicy{MaxMoves: o.defragMoves, Window: 3600, DrainAfter: drainAfter, MaxLostWork: maxLostWork},
		NodeLoss:    loss,
	})
	prog.finish()
	if err != nil {
		return err
	}
	return report(cmd, o, mode, tr.Source, results, len(configs) > 0)
}

// report writes --out and the results in the chosen format; summary
// prints event results as means over seeds.
func report(cmd *cobra.Command, o *options, mode simulator.Mode, source string, results []*simulator.Result, summary bool) error {
	format := *o.output
	if o.out != "" {
		if err := writeOut(o.out, mode, source, results); err != nil {
			return err
		}
	}
	stdout := cmd.OutOrStdout()
	if format.Data() {
		return encodeRuns(stdout, format, results)
	}
	if summary {
		if err := printEventSummary(stdout, results); err != nil {
			return err
		}
	} else if err := printTable(stdout, mode, results); err != nil {
		return err
	}
	if err := printNodeLoss(stdout, results, summary); err != nil {
		return err
	}
	if format == cliutil.Wide {
		return printRuns(stdout, results)
	}
	return nil
}

// encodeRuns writes one JSON object (a line) or one YAML document per
// run, without the curves and series that --out writes as CSV.
func encodeRuns(w io.Writer, format cliutil.Format, results []*simulator.Result) error {
	enc := json.NewEncoder(w)
	for i, r := range results {
		c := *r
		c.Curve = nil
		if c.Event != nil {
			e := *c.Event
			e.Utilization = nil
			c.Event = &e
		}
		if format == cliutil.JSON {
			if err := enc.Encode(&c); err != nil {
				return fmt.Errorf("writing json: %w", err)
			}
			continue
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if err := cliutil.Encode(w, cliutil.YAML, &c); err != nil {
			return err
		}
	}
	return nil
}

// printRuns is -o wide's table: one row per run (policy and seed).
func printRuns(w io.Writer, results []*simulator.Result) error {
	fmt.Fprintln(w, "\nRUNS")
	t := cliutil.NewTable(w)
	fmt.Fprintln(t, "POLICY\tSEED\tPODS\tFAILED PODS\tMILLI-GPU ALLOC\tGPUS IN USE\tFRAGMENTATION\tARRIVED DEMAND\tWALL")
	for _, r := range results {
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%.2f%%\t%.2f%%\t%.2f%%\t%.2f\t%.2fs\n", label(r), r.Seed, r.Pods, r.FailedPods,
			100*r.MilliGPUAllocationRatio, 100*r.GPUAllocationRatio, 100*r.Fragmentation, r.ArrivedDemand, r.WallSeconds)
	}
	return t.Flush()
}

// traceSeconds is a duration flag's value on the trace's clock, which
// counts whole seconds.
func traceSeconds(flag string, d time.Duration) (int64, error) {
	if d < 0 || d%time.Second != 0 {
		return 0, cliutil.Usagef("--%s %s: want whole seconds, 0 or more (the trace's clock counts seconds)", flag, d)
	}
	return int64(d / time.Second), nil
}

func readTrace(path, variant string) (*simulator.Trace, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w (want --trace to be an openb directory or a YAML file)", err)
	}
	if st.IsDir() {
		return simulator.ReadOpenB(path, variant)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	defer f.Close()
	return simulator.ReadYAMLTrace(path, f)
}

func writeOut(dir string, mode simulator.Mode, title string, results []*simulator.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating --out directory: %w", err)
	}
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("writing results: %w", err)
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write("results.csv", func(w io.Writer) error { return simulator.WriteResultsCSV(w, results) }); err != nil {
		return err
	}
	if mode == simulator.ModeEvent {
		if err := write("queues.csv", func(w io.Writer) error { return simulator.WriteEventCSV(w, results) }); err != nil {
			return err
		}
		if err := write("topology.csv", func(w io.Writer) error { return simulator.WriteTopologyCSV(w, results) }); err != nil {
			return err
		}
		if err := write("utilization.csv", func(w io.Writer) error { return simulator.WriteUtilizationCSV(w, results) }); err != nil {
			return err
		}
		return write("plot.svg", func(w io.Writer) error {
			return simulator.WriteEventPlot(w, "GPU allocation over time: "+title, results)
		})
	}
	if err := write("curve.csv", func(w io.Writer) error { return simulator.WriteCurveCSV(w, results) }); err != nil {
		return err
	}
	return write("plot.svg", func(w io.Writer) error {
		return simulator.WritePlot(w, "GPU allocation ratio vs arrived demand: "+title, results)
	})
}

func printTable(w io.Writer, mode simulator.Mode, results []*simulator.Result) error {
	t := cliutil.NewTable(w)
	if mode == simulator.ModeEvent {
		fmt.Fprintln(t, "POLICY\tSEED\tQUEUE\tPODS\tSTARTED\tWAIT P50\tWAIT P90\tJCT P50\tJCT P90\tSHARE\tENTITLED\tPREEMPTED")
		for _, r := range results {
			if r.Event == nil {
				continue
			}
			for _, q := range r.Event.Queues {
				fmt.Fprintf(t, "%s\t%d\t%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.3f\t%.3f\t%d\n", label(r), r.Seed, q.Queue, q.Pods, q.Started,
					q.WaitP50, q.WaitP90, q.JCTP50, q.JCTP90, q.Share, q.Entitlement, q.Preemptions)
			}
		}
		if err := t.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		t = cliutil.NewTable(w)
		fmt.Fprintln(t, "POLICY\tSEED\tPODS\tNEVER RAN\tMEAN UTIL\tPREEMPTIONS\tJAIN\tWALL")
		for _, r := range results {
			if r.Event != nil {
				fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%.2f%%\t%d\t%.3f\t%.2fs\n", label(r), r.Seed, r.Pods, r.FailedPods,
					100*r.Event.MeanUtilization, r.Event.Preemptions, r.Event.JainFairness, r.WallSeconds)
			}
		}
		if err := t.Flush(); err != nil {
			return err
		}
		return printTopology(w, results)
	}
	fmt.Fprintln(t, "POLICY\tRUNS\tMILLI-GPU ALLOC (MEAN)\tMEDIAN\tGPUS IN USE\tFRAGMENTATION\tFAILED PODS\tWALL/RUN")
	for _, s := range simulator.Summarize(results) {
		fmt.Fprintf(t, "%s\t%d\t%.2f%%\t%.2f%%\t%.2f%%\t%.2f%%\t%.0f\t%.2fs\n", s.Policy, s.Runs, 100*s.MeanMilliGPUAllocationRatio,
			100*s.MedianMilliGPUAllocationRatio, 100*s.MeanGPUAllocationRatio, 100*s.MeanFragmentation, s.MeanFailedPods, s.MeanWallSeconds)
	}
	return t.Flush()
}

// label names a run's policy and, when gangs were placed by the network,
// its topology policy.
func label(r *simulator.Result) string {
	if r.TopologyPolicy == "" {
		return r.Policy
	}
	return r.Policy + "/" + r.TopologyPolicy
}

// printTopology prints where the gangs placed by the network landed, one
// row per run that had any.
func printTopology(w io.Writer, results []*simulator.Result) error {
	var rows []*simulator.Result
	for _, r := range results {
		if r.Topology != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := cliutil.NewTable(w)
	fmt.Fprintln(t, "POLICY/TOPOLOGY\tSEED\tGANGS\tSTARTED\tREQUIRED IN ONE\tPREFERRED IN ONE\tCAN FIT: IN ONE\tFIT AT START: IN ONE\tDOMAINS/GANG\tGPU ALLOC (GANGS' WINDOW)\tGANG WAIT P50\tP90")
	share := func(s simulator.LevelStats, in, of int) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%% (%d/%d %s)", 100*float64(in)/float64(of), in, of, s.Level)
	}
	for _, r := range rows {
		s := r.Topology
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.2f (max %d)\t%.2f%%\t%.0f\t%.0f\n", label(r), r.Seed, s.Gangs, s.Started,
			share(s.Required, s.Required.InOne, s.Required.Gangs), share(s.Preferred, s.Preferred.InOne, s.Preferred.Gangs),
			share(s.Preferred, s.Preferred.CanFitInOne, s.Preferred.CanFit), share(s.Preferred, s.Preferred.FitAtStartInOne, s.Preferred.FitAtStart),
			s.Preferred.MeanDomains, s.Preferred.MaxDomains,
			100*s.GPUAllocation, s.WaitP50, s.WaitP90)
	}
	return t.Flush()
}

// progress draws a bar on a terminal and a few plain lines otherwise.
type progress struct {
	w        io.Writer
	tty      bool
	source   string
	lastLine int
	last     time.Time
	drawn    bool
}

func newProgress(w io.Writer, source string) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{w: w, tty: tty, source: source, lastLine: -1}
}

func (p *progress) update(done, total int, frac float64) {
	if p.tty {
		if time.Since(p.last) < 100*time.Millisecond && done < total {
			return
		}
		p.last = time.Now()
		const width = 30
		n := int(frac * width)
		fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% runs %d/%d", p.source, strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*frac, done, total)
		p.drawn = true
		return
	}
	// Plain output: a line at each quarter of the runs.
	q := 4 * done / max(total, 1)
	if q > p.lastLine && (done > 0 || p.lastLine < 0) {
		p.lastLine = q
		fmt.Fprintf(p.w, "simulate %s: %d/%d runs done\n", p.source, done, total)
	}
}

func (p *progress) finish() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}
