package adapter

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/buildinfo"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/version"
)

// Config configures a scheduler process. Zero fields take the defaults
// listed with Defaults.
type Config struct {
	// RESTConfig reaches the API server; QPS and Burst below override its
	// own.
	RESTConfig *rest.Config
	// QPS and Burst are the client's budget for all requests (binds,
	// evictions, status). Defaults 50 and 100.
	QPS   float32
	Burst int
	// SchedulerName is the spec.schedulerName the scheduler serves.
	SchedulerName string
	// Policy is the core's placement policy (placement.NewPolicy).
	Policy string
	// CycleInterval is the longest time between cycles; a change in the
	// cluster starts one sooner, but not sooner than MinCycleInterval after
	// the last. Defaults 1s and 10ms.
	CycleInterval    time.Duration
	MinCycleInterval time.Duration
	// BindWorkers is how many bindings are in flight at once (default
	// 768): a bind is one API round trip (three for a pod with a
	// ResourceClaim to allocate: the claim's finalizer, its status, the
	// binding), so this, not the CPU, bounds the bind rate when the API
	// server is slow to answer (32 workers at 150 ms each cap it near 200
	// pods/s); QPS still caps the total.
	BindWorkers int
	// RequestsInFlight bounds the API requests in flight at once on each
	// connection (BindConnections), watches aside (default 80): they then
	// fit one HTTP/2 connection, which kube-apiserver lets carry 100
	// streams unless its --http2-max-streams-per-connection says
	// otherwise, beside the informers' watches. Past it the client would
	// dial more connections, a TLS handshake each. Bind workers past it
	// wait for a slot.
	RequestsInFlight int
	// BindConnections is how many HTTP/2 connections the bindings are
	// spread over (default 4): the connection every other request uses
	// and BindConnections-1 of their own, each bounded to
	// RequestsInFlight, so that up to BindConnections x RequestsInFlight
	// bindings are in flight while no connection carries more streams
	// than the API server allows. Each connection is one TLS handshake
	// when it opens, not one per request.
	BindConnections int
	// EvictionQPS bounds evictions per second (default 10);
	// MaxEvictionsPerCycle bounds those one cycle may decide (default 64).
	EvictionQPS          float32
	MaxEvictionsPerCycle int
	// DefragMovesPerHour bounds the running groups the core may move in
	// any hour to gather scattered free GPUs for a waiting gang (only
	// workloads that opted in, v1alpha1.MovableAnnotation); 0, the
	// default, turns defragmentation off.
	DefragMovesPerHour int
	// DefragDrainAfter, with DefragMovesPerHour, is how long a gang whose
	// pods need whole nodes waits before the core drains nodes for it:
	// keeps new work off the nodes cheapest to empty and moves their
	// movable work off once it is all that is left
	// (model.DefragPolicy.DrainAfter); 0, the default, drains none.
	DefragDrainAfter time.Duration
	// DefragMaxLostWork, when positive, bounds the work a move may throw
	// away: a group is moved only within this long of its last
	// checkpoint (v1alpha1.LastCheckpointAnnotation) or, with none, of
	// its start (model.DefragPolicy.MaxLostWork); 0, the default, bounds
	// nothing.
	DefragMaxLostWork time.Duration
	// EvictionBackoff is how long a pod whose eviction was refused (a
	// PodDisruptionBudget, 429) is left alone (default 30s).
	EvictionBackoff time.Duration
	// StatusQPS bounds pod condition, PodGroup and Queue status writes per
	// second (default 20).
	StatusQPS float32
	// DiagnoseLimit bounds how many waiting groups a cycle explains in
	// detail (default 64): the per-node scan costs O(nodes).
	DiagnoseLimit int
	// NodeAutoscaler says a node autoscaler (Karpenter, Cluster
	// Autoscaler) adds nodes for pods that wait for room: a gang above
	// the nodes' capacity together is then reported Unschedulable, which
	// the autoscaler buys nodes for, not ExceedsClusterCapacity
	// (model.Snapshot.NodesMayBeAdded).
	NodeAutoscaler bool
	// ComingNodeTimeout is how long after its creation a node that offers
	// GPUs (gpunode.OfferAnnotation, or its GPU count label) and has not
	// registered them counts as coming: its pods wait for it instead of
	// being called Unschedulable (default 10m; coming.go).
	ComingNodeTimeout time.Duration
	// PartialGangGrace is how long a gang may stay partly bound before
	// its bound pods are deleted (default 30s), also when found so at
	// start-up.
	PartialGangGrace time.Duration
	// LeaderElection: when LeaseName is empty the scheduler does not elect
	// a leader (one replica only).
	LeaseName      string
	LeaseNamespace string
	Identity       string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	// Build is the scheduler's build: the gpuplane_build_info metric, and
	// the leader's Lease annotation (buildinfo.SchedulerAnnotation).
	// Defaults to version.Get().
	Build buildinfo.Info
	// ServeAddr serves /metrics, /healthz and /readyz; empty serves none.
	ServeAddr string
	// Profiling also serves Go's /debug/pprof/ on ServeAddr (heap, CPU,
	// goroutines), for diagnosing the scheduler's memory and time.
	Profiling bool
	// ManageCRDs: at start, apply the Queue and PodGroup CRDs the scheduler
	// was built with where the cluster's lack a field (server-side apply);
	// when false, such a cluster is only an error. Either way the scheduler
	// does not run against CRDs older than itself.
	ManageCRDs bool
	// NoDerivedGroups turns off deriving PodGroups from the workloads that
	// own pods (internal/adapter/grouper): pods then gang only through a
	// PodGroup they name.
	NoDerivedGroups bool
	// TopologyRecheck is how often, while the API server does not serve
	// Kueue's or KAI's Topology resource, the scheduler asks its discovery
	// again (default 30s): a CRD installed after the scheduler started is
	// read from then on. Each look is one discovery request per resource
	// not yet served; none once all are.
	TopologyRecheck time.Duration
	// MIG layouts that follow demand, on nodes labelled
	// gpuplane.io/mig-layout-policy=follow-demand: pending MIG (or
	// whole-GPU) demand must have waited MIGDemandMinWait (default 10s)
	// before an idle GPU is re-partitioned for it; a GPU proposed for is
	// left alone for MIGLayoutDwell (default 5m); a node takes at most
	// MIGMaxProposalsPerNode proposals per cycle (default 1) and none
	// while one of its proposals is not applied, for up to
	// MIGProposalTimeout (default 2m).
	MIGDemandMinWait       time.Duration
	MIGLayoutDwell         time.Duration
	MIGProposalTimeout     time.Duration
	MIGMaxProposalsPerNode int
	// DisruptionTaints and DisruptionConditions mark a node about to go
	// away (a spot reclaim, an autoscaler's scale-down): a taint of one
	// of these keys, of any effect, or a node condition of one of these
	// types that is True. Its gangs get notice and are evicted whole, to
	// be placed again elsewhere (disruption.go). Nil DisruptionTaints
	// means DefaultDisruptionTaints; DisruptionConditions has no default
	// (AKS's node-problem-detector reports VMEventScheduled, for one).
	DisruptionTaints     []string
	DisruptionConditions []string
	// Logger receives the scheduler's logs; nil discards.
	Logger *slog.Logger
}

// Defaults returns c with every zero field set to its default.
func (c Config) Defaults() Config {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Build.Version == "" {
		c.Build = version.Get()
	}
	if c.QPS == 0 {
		c.QPS = 50
	}
	if c.Burst == 0 {
		c.Burst = 100
	}
	if c.SchedulerName == "" {
		c.SchedulerName = v1alpha1.SchedulerName
	}
	if c.Policy == "" {
		c.Policy = placement.DefaultPolicy
	}
	set(&c.CycleInterval, time.Second)
	set(&c.MinCycleInterval, 10*time.Millisecond)
	if c.BindWorkers == 0 {
		c.BindWorkers = 768
	}
	if c.RequestsInFlight == 0 {
		c.RequestsInFlight = 80
	}
	if c.BindConnections == 0 {
		c.BindConnections = 4
	}
	if c.EvictionQPS == 0 {
		c.EvictionQPS = 10
	}
	if c.MaxEvictionsPerCycle == 0 {
		c.MaxEvictionsPerCycle = 64
	}
	set(&c.EvictionBackoff, 30*time.Second)
	if c.StatusQPS == 0 {
		c.StatusQPS = 20
	}
	if c.DiagnoseLimit == 0 {
		c.DiagnoseLimit = 64
	}
	set(&c.PartialGangGrace, 30*time.Second)
	set(&c.ComingNodeTimeout, DefaultComingNodeTimeout)
	set(&c.TopologyRecheck, 30*time.Second)
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = "kube-system"
	}
	set(&c.LeaseDuration, 15*time.Second)
	set(&c.RenewDeadline, 10*time.Second)
	set(&c.RetryPeriod, 2*time.Second)
	set(&c.MIGDemandMinWait, 10*time.Second)
	set(&c.MIGLayoutDwell, 5*time.Minute)
	set(&c.MIGProposalTimeout, 2*time.Minute)
	if c.MIGMaxProposalsPerNode == 0 {
		c.MIGMaxProposalsPerNode = 1
	}
	if c.DisruptionTaints == nil {
		c.DisruptionTaints = DefaultDisruptionTaints
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.RESTConfig == nil:
		return errors.New("config: no API server to talk to: give --kubeconfig or run in a cluster")
	case c.QPS < 0 || c.Burst < 0:
		return fmt.Errorf("config: kube-api-qps and kube-api-burst must be >= 0, got %g and %d", c.QPS, c.Burst)
	case c.BindWorkers < 0:
		return fmt.Errorf("config: bind-workers must be >= 1, got %d", c.BindWorkers)
	case c.RequestsInFlight < 0:
		return fmt.Errorf("config: api-requests-in-flight must be >= 1, got %d", c.RequestsInFlight)
	case c.BindConnections < 0:
		return fmt.Errorf("config: bind-connections must be >= 1, got %d", c.BindConnections)
	case c.MinCycleInterval > c.CycleInterval:
		return fmt.Errorf("config: min-cycle-interval %v must not exceed cycle-interval %v", c.MinCycleInterval, c.CycleInterval)
	case c.LeaseName != "" && c.Identity == "":
		return errors.New("config: leader election needs an identity: set --leader-elect-identity (defaults to the host name)")
	case c.ComingNodeTimeout < 0:
		return fmt.Errorf("config: coming-node-timeout must be >= 0, got %v", c.ComingNodeTimeout)
	case c.DefragMovesPerHour < 0:
		return fmt.Errorf("config: defrag-moves-per-hour must be >= 0, got %d", c.DefragMovesPerHour)
	case c.DefragDrainAfter < 0:
		return fmt.Errorf("config: defrag-drain-after must be >= 0, got %v", c.DefragDrainAfter)
	case c.DefragMaxLostWork < 0:
		return fmt.Errorf("config: defrag-max-lost-work must be >= 0, got %v", c.DefragMaxLostWork)
	case c.TopologyRecheck < 0:
		return fmt.Errorf("config: the topology re-check interval must be > 0, got %v", c.TopologyRecheck)
	case c.MIGDemandMinWait < 0:
		return fmt.Errorf("config: mig-demand-min-wait must be >= 0, got %v", c.MIGDemandMinWait)
	case c.MIGLayoutDwell < 0:
		return fmt.Errorf("config: mig-layout-dwell must be >= 0, got %v", c.MIGLayoutDwell)
	case c.MIGProposalTimeout < 0:
		return fmt.Errorf("config: mig-proposal-timeout must be >= 0, got %v", c.MIGProposalTimeout)
	case c.MIGMaxProposalsPerNode < 0 || c.MIGMaxProposalsPerNode > gpunode.MaxGPUs:
		return fmt.Errorf("config: mig-max-proposals-per-node must be 1 to %d, got %d", gpunode.MaxGPUs, c.MIGMaxProposalsPerNode)
	case c.LeaseName != "" && c.RenewDeadline >= c.LeaseDuration:
		return fmt.Errorf("config: leader-elect-renew-deadline %v must be shorter than leader-elect-lease-duration %v", c.RenewDeadline, c.LeaseDuration)
	}
	return nil
}
