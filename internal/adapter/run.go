package adapter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter/grouper"
	"github.com/gpuplane/gpuplane/internal/apifeatures"
	versionmetric "github.com/gpuplane/gpuplane/internal/version/metric"
)

// ErrLostLeadership is returned by Run when another replica took over the
// Lease: the process should exit and restart as a candidate.
var ErrLostLeadership = errors.New("lost the scheduler's leader lease")

// Run schedules until ctx ends (nil) or leadership is lost
// (ErrLostLeadership). With cfg.LeaseName set it first waits to lead; a
// standby replica keeps its informers warm and reports ready.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := logr.FromSlogHandler(cfg.Logger.Handler()).WithName("gpuplane-scheduler")
	rc, client, lanes, err := newAPIClients(cfg)
	if err != nil {
		return err
	}
	// The bind connections open while the cluster is read, so that the
	// first burst of binds finds them open instead of waiting behind a
	// handshake each.
	openLanes(ctx, lanes, log)
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating the API client for CRDs: %w", err)
	}
	c := newClusterCache(cfg.SchedulerName)
	c.disruption = disruptionMarks{taints: cfg.DisruptionTaints, conditions: cfg.DisruptionConditions}
	c.comingTimeout = cfg.ComingNodeTimeout

	// Informers feed the cache with only what the scheduler reads
	// (forCache). Those of built-in kinds start listing now, while
	// gpuplane's CRDs are checked, the optional APIs are discovered and
	// the grouper is built (a list of thousands of pods takes as long as
	// those round trips together, and none of them needs it); their
	// handlers are added below, once the cache can take every object (an
	// informer hands a handler added late everything it holds, and says
	// the handler synced only when it has). They stop when Run returns.
	ictx, stopInformers := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(forCache))
	dfactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	defer func() {
		stopInformers()
		dfactory.Shutdown()
		factory.Shutdown()
	}()
	// Kubernetes' own kinds start now; gpuplane's and DRA's once the
	// APIs served are known.
	var regs []informerReg
	later := kinds[:0:0]
	for _, k := range kinds {
		if k.DRA || k.Resource.Group == v1alpha1.GroupName {
			later = append(later, k)
			continue
		}
		regs = append(regs, informerReg{k.Informer(factory, dfactory), c.kindHandler(log)})
	}
	factory.Start(ictx.Done())
	// gpuplane's own kinds are listed only once their CRDs are known to
	// be what this build reads.
	if err := ensureCRDsRetrying(ctx, dyn, rc.Host, cfg.ManageCRDs, log); err != nil {
		return err
	}

	m := newMetrics()
	if err := m.reg.Register(versionmetric.New(cfg.Build)); err != nil {
		return fmt.Errorf("registering the build info metric: %w", err)
	}
	// Kueue's and KAI's Topologies, where the cluster serves them: those
	// served now are synced with the rest; a CRD installed later is found
	// by a re-check every cfg.TopologyRecheck. Looked up while the
	// optional APIs are.
	foreign := &foreignTopologyWatch{c: c, disc: client.Discovery(), factory: dfactory, log: log}
	foreignRegs := make(chan []informerReg, 1)
	go func() { foreignRegs <- foreign.look(ctx) }()
	served, err := discoverAPIs(client.Discovery(), m, log)
	regs = append(regs, <-foreignRegs...)
	if err != nil {
		return err
	}
	for _, k := range later {
		if k.DRA && !served.Has(apifeatures.DRA) {
			continue
		}
		regs = append(regs, informerReg{k.Informer(factory, dfactory), c.kindHandler(log)})
	}
	// Karpenter's NodePools, with a node autoscaler, where the cluster
	// serves them: their limits bound what it may add (nodepools.go).
	if cfg.NodeAutoscaler {
		if rs, err := client.Discovery().ServerResourcesForGroupVersion(NodePoolsResource.GroupVersion().String()); err == nil && slices.ContainsFunc(rs.APIResources, func(r metav1.APIResource) bool { return r.Name == NodePoolsResource.Resource }) {
			regs = append(regs, informerReg{dfactory.ForResource(NodePoolsResource).Informer(), handler(c.upsertNodePool, c.deleteNodePool)})
		} else {
			log.Info("no Karpenter NodePools served: node pool limits are not read", "resource", NodePoolsResource.String())
		}
	}
	// Pod groups derived from the workloads that own pods: the grouper
	// answers the cache's pods and makes groups while this replica leads.
	var grp *grouper.Grouper
	if !cfg.NoDerivedGroups {
		disc, err := discovery.NewDiscoveryClientForConfig(rc)
		if err != nil {
			return fmt.Errorf("creating the discovery client: %w", err)
		}
		grp, err = grouper.New(grouper.Config{SchedulerName: cfg.SchedulerName, Client: client, Dynamic: dyn,
			Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)), Log: log.WithName("grouper"),
			Topologies: c.topologies.Levels, WorkloadAPIVersion: workloadAPIVersion(served)})
		if err != nil {
			return err
		}
		grp.OnSettled(c.regroup)
		c.grouping = grp
		regs = append(regs, informerReg{dfactory.ForResource(v1alpha1.GroupingRulesResource).Informer(), handler(typed(log, grp.UpsertRule), typed(log, grp.DeleteRule))})
	}
	// delivered says when each handler has been given its informer's
	// initial list: an informer's own sync says only that its store holds
	// the list, while the handlers that fill the cache may still be
	// working through it.
	delivered := make([]cache.DoneChecker, 0, len(regs))
	for _, r := range regs {
		reg, err := r.inf.AddEventHandler(r.h)
		if err != nil {
			if cerr := context.Cause(ctx); cerr != nil {
				// Stopped while starting: the informers started early
				// have ended with the context.
				return fmt.Errorf("starting: %w", cerr)
			}
			return fmt.Errorf("registering an informer handler: %w", err)
		}
		delivered = append(delivered, reg.HasSyncedChecker())
	}
	var ready atomic.Bool
	stopServe, err := serve(cfg.ServeAddr, cfg.Profiling, m, &ready, log)
	if err != nil {
		return err
	}
	defer stopServe()
	probeCfg := rest.CopyConfig(rc)
	probeCfg.Timeout = apiRetryLog
	probe, err := discovery.NewDiscoveryClientForConfig(probeCfg)
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	synced := make(chan struct{})
	go reportReachability(ctx, probe, rc.Host, log, synced, apiRetryLog)
	// The informers of kinds found above (DRA's) and of CRDs.
	factory.Start(ictx.Done())
	dfactory.Start(ictx.Done())
	// The first cycle must see every pod already bound: placing pods
	// against a cache still short of some would over-fill their nodes. A
	// handler's sync implies its informer's. Waited for on channels, not
	// by client-go's polls every 100 ms, which the first cycle would wait
	// out.
	if !cache.WaitFor(ctx, "", delivered...) {
		return fmt.Errorf("syncing the informers of %s (are the CRDs in deploy/crds installed?): %w", unsynced(delivered), context.Cause(ctx))
	}
	close(synced)
	ready.Store(true)
	log.Info("caches synced")
	if foreign.missing() {
		// Ended and waited for before the informers are shut down.
		fctx, fcancel := context.WithCancel(ctx)
		fdone := make(chan struct{})
		go func() {
			defer close(fdone)
			foreign.run(fctx, cfg.TopologyRecheck)
		}()
		defer func() {
			fcancel()
			<-fdone
		}()
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building the event scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building the event scheme: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: cfg.SchedulerName})
	if grp != nil {
		grp.SetRecorder(recorder)
	}

	lead := func(ctx context.Context) {
		m.leader.Set(1)
		defer m.leader.Set(0)
		log.Info("leading: scheduling", "identity", cfg.Identity, "version", cfg.Build.Version)
		if cfg.LeaseName != "" {
			go recordBuild(ctx, client.CoordinationV1(), cfg.LeaseNamespace, cfg.LeaseName, cfg.Build, time.Second, log)
		}
		st := newStatusWriter(client, dyn, recorder, cfg.StatusQPS, log)
		api := newAPIWriter(ctx, client, dyn, cfg, log, m, st)
		api.lanes = lanes
		l, err := newLoop(cfg, log, c, api, st, m)
		if err != nil {
			log.Error(err, "starting the scheduling loop")
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			st.run(ctx)
		}()
		if grp != nil {
			go grp.Run(ctx)
		}
		l.run(ctx)
		api.wait()
		<-done
	}
	if cfg.LeaseName == "" {
		lead(ctx)
		return nil
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.LeaseNamespace, cfg.LeaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: cfg.Identity, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("creating the leader lease lock: %w", err)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: cfg.SchedulerName, ReleaseOnCancel: true,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() { log.Info("stopped leading", "identity", cfg.Identity) },
		},
	})
	if err != nil {
		return fmt.Errorf("configuring leader election: %w", err)
	}
	le.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return ErrLostLeadership
}

// discoverAPIs looks up, once at start, which optional Kubernetes APIs the
// cluster serves (apifeatures), sets gpuplane_scheduler_api_served, and
// says in one line each what is off where one is missing: the scheduler
// then runs without it instead of waiting on a watch the API server
// refuses.
func discoverAPIs(d discovery.DiscoveryInterface, m *metrics, log logr.Logger) (apifeatures.Served, error) {
	features := []apifeatures.Feature{apifeatures.DRA, apifeatures.WorkloadAPI, apifeatures.AdmissionPolicies}
	served, err := apifeatures.Discover(d, features...)
	if err != nil {
		return served, fmt.Errorf("finding the optional APIs the cluster serves: %w", err)
	}
	for _, f := range features {
		if r, ok := served.Resource(f); ok {
			m.apiServed.WithLabelValues(f.Name).Set(1)
			log.V(1).Info("optional API served", "feature", f.Name, "at", r.GroupVersion().String())
			continue
		}
		m.apiServed.WithLabelValues(f.Name).Set(0)
		log.Info("feature off: "+f.Reason(), "feature", f.Name)
	}
	return served, nil
}

// workloadAPIVersion is the apiVersion of the Workload API's PodGroup the
// cluster serves; empty, the grouper's default, when it serves none.
func workloadAPIVersion(s apifeatures.Served) string {
	if r, ok := s.Resource(apifeatures.WorkloadAPI); ok {
		return r.GroupVersion().String()
	}
	return ""
}

// apiRetryLog is how often an unreachable API server is logged again.
const apiRetryLog = 5 * time.Second

// reportReachability says at once when the API server cannot be reached,
// and again every interval until it answers or the informers are synced:
// without it a scheduler pointed at a wrong address waits in silence.
func reportReachability(ctx context.Context, d discovery.ServerVersionInterface, host string, log logr.Logger, synced <-chan struct{}, every time.Duration) {
	failed := false
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		v, err := d.ServerVersion()
		switch {
		case err != nil:
			failed = true
			log.Error(err, "cannot reach the API server; retrying", "host", host, "every", every)
		case failed:
			log.Info("reached the API server", "host", host, "version", v.GitVersion)
			return
		default:
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-synced:
			return
		case <-t.C:
		}
	}
}

// typed converts the dynamic informer's unstructured objects to T.
func typed[T any, PT interface {
	*T
	runtime.Object
}](log logr.Logger, f func(PT)) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		var obj PT = new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
			log.Error(err, "decoding a scheduling object; it is ignored until fixed", "kind", u.GetKind(), "name", u.GetName())
			return
		}
		f(obj)
	}
}

// serve starts the /metrics, /healthz and /readyz server on addr (none when
// addr is empty), with /debug/pprof/ when profiling, and returns its stop
// function.
func serve(addr string, profiling bool, m *metrics, ready *atomic.Bool, log logr.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "informer caches not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics and health on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "metrics server stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// newAPIClients builds gpuplane-scheduler's API clients from cfg: rc, the
// shared connection's config with its requests in flight bounded (JSON,
// for the dynamic and discovery clients); client, the typed client on that
// connection (protobuf); and the bind connections' clients (bindLanes),
// which share client's budget of QPS and Burst, as the typed client alone
// had it.
func newAPIClients(cfg Config) (*rest.Config, kubernetes.Interface, []kubernetes.Interface, error) {
	rc := rest.CopyConfig(cfg.RESTConfig)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	rc.UserAgent = "gpuplane-scheduler"
	unbounded := rest.CopyConfig(rc)
	rc.Wrap(limitInFlight(cfg.RequestsInFlight))
	proto := rest.CopyConfig(rc)
	proto.ContentType = "application/vnd.kubernetes.protobuf"
	proto.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	proto.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	client, err := kubernetes.NewForConfig(proto)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating the API client: %w", err)
	}
	lanes, err := bindLanes(unbounded, proto, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return rc, client, lanes, nil
}

// laneIdle is how long a bind connection may go unanswered before its
// next burst is let through one request first (coldGate): well within
// client-go's idle timeout of 90s, after which the connection is closed.
const laneIdle = 30 * time.Second

// bindLanes returns the clients of the bindings' own connections
// (cfg.BindConnections less the shared one). Each is built from base,
// which has no limit on requests in flight, with a limit of its own and a
// dialer of its own, so that client-go does not hand it the shared
// connection's transport, and a coldGate, so that a burst of binds on a
// connection closed while idle dials once; they take proto's content
// types and rate limiter.
func bindLanes(base, proto *rest.Config, cfg Config) ([]kubernetes.Interface, error) {
	var lanes []kubernetes.Interface
	for range cfg.BindConnections - 1 {
		lc := rest.CopyConfig(base)
		lc.ContentType, lc.AcceptContentTypes, lc.RateLimiter = proto.ContentType, proto.AcceptContentTypes, proto.RateLimiter
		lc.Wrap(gateCold(laneIdle, time.Now))
		lc.Wrap(limitInFlight(cfg.RequestsInFlight))
		lc.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		c, err := kubernetes.NewForConfig(lc)
		if err != nil {
			return nil, fmt.Errorf("creating a bind connection's API client: %w", err)
		}
		lanes = append(lanes, c)
	}
	return lanes, nil
}

// unsynced names the checkers of checks not done yet.
func unsynced(checks []cache.DoneChecker) string {
	var names []string
	for _, c := range checks {
		if !cache.IsDone(c) {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// openLanes opens each bind connection with one small request (the API
// server's version), in the background. A lane is otherwise first used by
// a burst of binds, whose requests its coldGate holds back until the first
// has dialed and been answered: on the critical path of the first binds.
func openLanes(ctx context.Context, lanes []kubernetes.Interface, log logr.Logger) {
	for i, l := range lanes {
		go func() {
			if err := l.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil && ctx.Err() == nil {
				log.V(1).Info("opening a bind connection failed; its first bind opens it", "lane", i+1, "err", err)
			}
		}()
	}
}
