// Command gpuplane-scheduler is gpuplane's cluster scheduler for GPU batch
// work: pods that set spec.schedulerName: gpuplane-scheduler get queues,
// gangs, quotas, fair share, preemption and GPU-aware placement. main turns
// flags into an adapter.Config and runs it; everything else lives in
// internal/adapter.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/gomem"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/version"
)

// defaultGCPercent is --gc-percent's default. Most of the scheduler's heap
// is its long-lived cache, so the collector's headroom, not garbage, is
// most of what the process holds beyond it: at 5,000 nodes with 40,000
// pods waiting, 50 left 452 MiB resident against 571 MiB at Go's 100, for
// 8% of CPU spent collecting against 2% while the backlog drained
// (docs/benchmarks.md, "With the transform applied once and --gc-percent
// 50 by default").
const defaultGCPercent = 50

const usage = `gpuplane-scheduler schedules the pods that opt in with
spec.schedulerName: gpuplane-scheduler.

Pods join a gang with the label scheduling.gpuplane.io/pod-group=<PodGroup>
(or scheduler-plugins' scheduling.x-k8s.io/pod-group label, or Volcano's
scheduling.k8s.io/group-name annotation). A pod that names none and is owned
by a workload (a Job, JobSet, PyTorchJob, MPIJob, TrainJob, RayCluster,
Deployment, ... or any kind a GroupingRule names) joins the PodGroup the
scheduler makes for that workload (--derive-pod-groups): its size comes from
the workload's spec, its queue from the workload's labels.

A pod's queue is its PodGroup's spec.queue, else the first of its labels
scheduling.gpuplane.io/queue, kueue.x-k8s.io/queue-name, kai.scheduler/queue
or its annotation scheduling.volcano.sh/queue-name (two that disagree make
it wait), else its namespace's scheduling.gpuplane.io/default-queue
annotation, else the built-in "default" queue. Work runs in leaf queues,
from the namespaces each queue admits (spec.namespaceSelector).

At start the scheduler applies the Queue, PodGroup, GroupingRule and Topology CRDs it
was built with where the cluster's are missing or lack a field
(--manage-crds), and refuses to run against older ones.

A gang is bound only when all of it (spec.minMember pods) has a place: its
placement is written to the PodGroup's status.placement first, then its pods
are bound. After a crash or a failover the new leader finishes a recorded
placement that still fits; a gang left partly bound longer than
--partial-gang-grace has its bound pods deleted. Pods wait with
PodScheduled=False and an event that says why.

On nodes labelled gpuplane.io/mig-layout-policy=follow-demand the scheduler
proposes MIG layouts for idle GPUs (annotation gpuplane.io/mig-proposal):
an idle whole GPU becomes all instances of a MIG profile pending pods ask
for and no GPU offers, an idle MIG GPU turns whole for pending whole-GPU
pods; gpuplane-agent applies them. Hysteresis: --mig-demand-min-wait,
--mig-layout-dwell, --mig-proposal-timeout, --mig-max-proposals-per-node.

Run two replicas with --leader-elect (the default): one schedules, the other
waits on the Lease. Metrics are on --serve-address/metrics, health on
/healthz and /readyz.

Usage:
  gpuplane-scheduler [flags]

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("gpuplane-scheduler", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	def := adapter.Config{}.Defaults()
	host, _ := os.Hostname()
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, then the in-cluster service account")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	showVersion := fs.Bool("version", false, "print the build (version, commit, date, Go and client-go versions) and exit")
	leaderElect := fs.Bool("leader-elect", true, "elect a leader on a Lease so that several replicas are safe")
	cfg := adapter.Config{}
	fs.Float32Var(&cfg.QPS, "kube-api-qps", def.QPS, "requests per second to the API server (binds, evictions, status)")
	fs.IntVar(&cfg.Burst, "kube-api-burst", def.Burst, "burst of requests to the API server")
	fs.StringVar(&cfg.SchedulerName, "scheduler-name", def.SchedulerName, "the spec.schedulerName this scheduler serves")
	fs.StringVar(&cfg.Policy, "policy", def.Policy, "placement policy of the scheduling core: "+strings.Join(placement.PolicyNames(), ", ")+", or custom:plugin=weight,... (gpuplane, the default's earlier name, selects "+placement.DefaultPolicy+")")
	fs.DurationVar(&cfg.CycleInterval, "cycle-interval", def.CycleInterval, "longest time between scheduling cycles")
	fs.DurationVar(&cfg.MinCycleInterval, "min-cycle-interval", def.MinCycleInterval, "shortest time between cycles; changes arriving meanwhile are batched")
	fs.IntVar(&cfg.BindWorkers, "bind-workers", def.BindWorkers, "bindings in flight at once")
	fs.IntVar(&cfg.RequestsInFlight, "api-requests-in-flight", def.RequestsInFlight, "API requests in flight at once on each connection (see --bind-connections), watches aside: keep it under the API server's streams per HTTP/2 connection (kube-apiserver's --http2-max-streams-per-connection, 100 by default) less the watches, or the client dials more connections")
	fs.IntVar(&cfg.BindConnections, "bind-connections", def.BindConnections, "HTTP/2 connections the bindings are spread over, the shared one included, each with at most api-requests-in-flight requests in flight")
	fs.Float32Var(&cfg.EvictionQPS, "eviction-qps", def.EvictionQPS, "evictions per second at most")
	fs.IntVar(&cfg.MaxEvictionsPerCycle, "max-evictions-per-cycle", def.MaxEvictionsPerCycle, "evictions one cycle may decide")
	fs.IntVar(&cfg.DefragMovesPerHour, "defrag-moves-per-hour", def.DefragMovesPerHour, "running groups that opted in (annotation scheduling.gpuplane.io/movable) the scheduler may move in any hour to gather scattered free GPUs for a waiting gang; 0 turns defragmentation off")
	fs.DurationVar(&cfg.DefragDrainAfter, "defrag-drain-after", def.DefragDrainAfter, "with --defrag-moves-per-hour, how long a gang whose pods need whole nodes waits before the scheduler drains nodes for it: keeps new pods off the nodes cheapest to empty (counting only pods that may not move) and moves their movable pods off once nothing else is left; 0 drains none")
	fs.DurationVar(&cfg.DefragMaxLostWork, "defrag-max-lost-work", def.DefragMaxLostWork, "with --defrag-moves-per-hour, the most work a move may throw away: a group is moved only within this long of its last checkpoint (annotation scheduling.gpuplane.io/last-checkpoint) or, having reported none, of its start, and otherwise stays until it checkpoints again; 0 bounds nothing")
	fs.DurationVar(&cfg.EvictionBackoff, "eviction-backoff", def.EvictionBackoff, "how long a pod whose eviction was refused (PodDisruptionBudget) is left alone")
	fs.Float32Var(&cfg.StatusQPS, "status-qps", def.StatusQPS, "pod condition, PodGroup and Queue status writes per second")
	fs.IntVar(&cfg.DiagnoseLimit, "diagnose-limit", def.DiagnoseLimit, "waiting groups explained in detail per cycle")
	fs.DurationVar(&cfg.ComingNodeTimeout, "coming-node-timeout", def.ComingNodeTimeout, "how long after its creation a node that offers GPUs (its gpuplane.io/gpu-offer annotation or nvidia.com/gpu.count label) but has not registered them counts as coming: pods that fit it wait for it (reason NodesComing) rather than being called Unschedulable; after that it counts as it is, with a GPUsNotRegistered event (default 10m)")
	fs.BoolVar(&cfg.NodeAutoscaler, "node-autoscaler", def.NodeAutoscaler, "a node autoscaler (Karpenter, Cluster Autoscaler) adds nodes for pods that wait for room: a gang larger than all nodes together is reported Unschedulable, so that it buys nodes for it, instead of ExceedsClusterCapacity")
	fs.DurationVar(&cfg.PartialGangGrace, "partial-gang-grace", def.PartialGangGrace, "how long a gang may stay partly bound before its bound pods are deleted")
	fs.StringSliceVar(&cfg.DisruptionTaints, "disruption-taints", def.DisruptionTaints, "taint keys (any effect) that mark a node about to go away: its gangs get notice and are evicted whole; empty for none")
	fs.StringSliceVar(&cfg.DisruptionConditions, "disruption-conditions", def.DisruptionConditions, "node condition types that, when True, mark a node about to go away (VMEventScheduled on AKS, say)")
	fs.DurationVar(&cfg.MIGDemandMinWait, "mig-demand-min-wait", def.MIGDemandMinWait, "how long pending MIG or whole-GPU demand waits before an idle GPU of a follow-demand node is re-partitioned for it")
	fs.DurationVar(&cfg.MIGLayoutDwell, "mig-layout-dwell", def.MIGLayoutDwell, "how long a GPU whose MIG layout was proposed is left alone before another proposal")
	fs.DurationVar(&cfg.MIGProposalTimeout, "mig-proposal-timeout", def.MIGProposalTimeout, "how long a MIG proposal the node has not applied holds its node and GPU")
	fs.IntVar(&cfg.MIGMaxProposalsPerNode, "mig-max-proposals-per-node", def.MIGMaxProposalsPerNode, "GPUs of one node a cycle may propose a MIG layout for")
	fs.StringVar(&cfg.LeaseName, "leader-elect-lease-name", "gpuplane-scheduler", "name of the leader Lease")
	fs.StringVar(&cfg.LeaseNamespace, "leader-elect-namespace", def.LeaseNamespace, "namespace of the leader Lease")
	fs.StringVar(&cfg.Identity, "leader-elect-identity", host, "this replica's identity in the Lease (unique per replica)")
	fs.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", def.LeaseDuration, "how long a standby waits before taking an unrenewed Lease")
	fs.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", def.RenewDeadline, "how long the leader retries renewing before it gives up")
	fs.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", def.RetryPeriod, "time between Lease attempts")
	fs.StringVar(&cfg.ServeAddr, "serve-address", ":10259", "address of /metrics, /healthz and /readyz; empty serves none")
	derive := fs.Bool("derive-pod-groups", true, "make a PodGroup for each workload that owns pending pods (Job, JobSet, PyTorchJob, RayCluster, ... and any kind a GroupingRule names) and label its pods with it; false leaves pods that name no PodGroup on their own")
	fs.BoolVar(&cfg.ManageCRDs, "manage-crds", true, "at start, apply the Queue and PodGroup CRDs this scheduler was built with where the cluster's lack a field (server-side apply; RBAC: get and patch customresourcedefinitions); false only checks them. It never runs against older CRDs")
	gcPercent := fs.Int("gc-percent", defaultGCPercent, "how much garbage the Go collector lets the heap carry, in percent of what is live (GOGC, which wins when set): the heap is mostly the long-lived cache, so a lower value keeps memory near the live heap for more CPU spent collecting (at 5,000 nodes with 40,000 pods waiting: 50 holds 452 MiB and collects with 8% of CPU, 100 holds 571 MiB with 2%). Inside a container the heap's soft limit is 90% of its memory limit unless GOMEMLIMIT is set")
	fs.BoolVar(&cfg.Profiling, "profiling", false, "also serve Go's /debug/pprof/ on --serve-address (heap, CPU, goroutines), to diagnose memory or time; keep that address off the network when on")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gpuplane-scheduler: %v\nUsage: gpuplane-scheduler [flags]\nRun 'gpuplane-scheduler --help' for the flags.\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpuplane-scheduler: unexpected argument %q: it takes flags only\nUsage: gpuplane-scheduler [flags]\nRun 'gpuplane-scheduler --help' for the flags.\n", fs.Arg(0))
		return 2
	}
	build := version.Get()
	if *showVersion {
		fmt.Fprintln(stdout, "gpuplane-scheduler "+version.String(build))
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "gpuplane-scheduler: --log-level %q: want debug, info, warn or error\n", *logLevel)
		return 2
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *gcPercent < 10 || *gcPercent > 1000 {
		fmt.Fprintf(stderr, "gpuplane-scheduler: --gc-percent %d: want 10 to 1000\n", *gcPercent)
		return 2
	}
	mem, err := gomem.Apply(os.Getenv, "/sys/fs/cgroup", *gcPercent)
	if err != nil {
		cfg.Logger.Warn("no soft memory limit from the container's", "err", err)
	}
	if mem.LimitFrom != "" {
		cfg.Logger.Info("memory", "gcPercent", mem.GCPercent, "fromGOGC", mem.GCFromEnv, "softLimitBytes", mem.Limit, "softLimitFrom", mem.LimitFrom)
	} else {
		cfg.Logger.Info("memory", "gcPercent", mem.GCPercent, "fromGOGC", mem.GCFromEnv, "softLimit", "none")
	}
	cfg.Build = build
	cfg.NoDerivedGroups = !*derive
	if !*leaderElect {
		cfg.LeaseName = ""
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "gpuplane-scheduler: loading the kubeconfig: %v (give --kubeconfig or run in a cluster)\n", err)
		return 1
	}
	cfg.RESTConfig = rc
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := adapter.Run(ctx, cfg); err != nil {
		cfg.Logger.Error("gpuplane-scheduler stopped", "err", err)
		return 1
	}
	return 0
}
