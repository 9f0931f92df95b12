package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/backends"
	"github.com/gpuplane/gpuplane/internal/labels"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/mps"
	"github.com/gpuplane/gpuplane/internal/nodecond"
	"github.com/gpuplane/gpuplane/internal/sharing"
	"github.com/gpuplane/gpuplane/internal/steer"
	"github.com/gpuplane/gpuplane/internal/version"
	versionmetric "github.com/gpuplane/gpuplane/internal/version/metric"
)

// runAgentOnce builds the agent's parts from the flags and runs them until
// ctx ends or one stops. It only wires: each part has a constructor below,
// and what the device plugin serves reaches the others through the served
// snapshot and one fan-out (followers).
func runAgentOnce(ctx context.Context, f *runFlags, stderr io.Writer) error {
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	st, err := readStart(ctx, f, log)
	if err != nil {
		return err
	}
	node := st.node
	sink, err := labelsSink(f, node, log.With("part", "labels"))
	if err != nil {
		return err
	}
	backend, err := openBackend(ctx, f, node, st.first.cfg, log)
	if err != nil {
		return err
	}
	defer func() { _ = backend.Close() }()
	devices, err := backend.Devices(ctx)
	if err != nil {
		return fmt.Errorf("listing GPUs: %w", err)
	}

	// Ends the SIGHUP watch also when a part fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reload := watchReload(ctx, st.configFile, log)
	if st.selector != nil {
		go func() {
			if err := st.selector.run(ctx, st.selectorAPI, node, reload); err != nil {
				log.Error("watching the node's config choice", "err", err)
			}
		}()
	}
	healthSrc := newMonitorHealth(devices)
	probe := newProbes(healthSrc)
	probe.host = newHostChecks(backend, devices, hostDevRoot(backend), f.cdiDir)
	plugin := PluginOptions{
		ConfigFile: st.configFile, SelectConfig: st.selectConfig, Overrides: st.overrides, KubeletDir: f.kubeletDir, CDIDir: f.cdiDir,
		Backend: backend, HealthCheckInterval: f.healthEvery, LookupEnv: os.LookupEnv, Reload: reload,
		OnHealth: healthSrc.set, OnManager: probe.setManager, Logger: log,
	}
	// The resources the plugin serves: stored by the plugin, read by the
	// others.
	served := &servedResources{}
	var parts []part

	// The API server, when configured: the pods bound to the node, and
	// the GPUs gpuplane-scheduler chose for them.
	apiConfig, podsOnNode, err := nodeAPI(ctx, f, node, log)
	if err != nil {
		return err
	}
	// Without the DRA API the driver is off and the device plugin serves.
	if err := checkDRAServed(ctx, f, apiConfig, node, log.With("part", "dra")); err != nil {
		return err
	}
	if podsOnNode != nil {
		plugin.Steer = steer.New(podsOnNode.cached, podsOnNode.list, len(devices), log.With("part", "steer"))
		if p, ok := recorderPart(f.podResourcesSocket, served, podsOnNode, len(devices), log.With("part", "record")); ok {
			parts = append(parts, p)
		}
	}
	if apiConfig != nil {
		nodes, err := newNodeClient(apiConfig)
		if err != nil {
			return err
		}
		p, err := buildPart(nodes, node, version.Get(), time.Second, log.With("part", "build"))
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	if apiConfig != nil && f.nodeCondition {
		p, err := conditionPart(apiConfig, node, len(devices), probe, log.With("part", "condition"))
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	if f.simControlAddr != "" {
		p, err := simControlPart(backend, f.simControlAddr, log.With("part", "sim control"))
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	// With the DRA driver on, the quarantine and the MIG part see the
	// pods holding prepared claims on a GPU through link (filled by
	// draParts), and have the driver read the GPUs again after they
	// change them.
	link := newDRALink(backend, devices)
	var quarantine *quarantinePart
	if apiConfig != nil {
		if quarantine, err = newQuarantinePart(apiConfig, node, st.first.cfg, backend, devices, podsOnNode, served.load, link, f.podResourcesSocket, healthSrc, log.With("part", "quarantine")); err != nil {
			return err
		}
		if quarantine != nil {
			parts = append(parts, part{name: "quarantine", run: quarantine.run})
		}
	}
	var migW *migWiring
	if f.migConfigMap != "" {
		if migW, err = migParts(ctx, f, apiConfig, node, backend, podsOnNode, served, link, reload, log.With("part", "mig")); err != nil {
			return err
		}
		plugin.WrapHealth = migW.gate.wrap
		parts = append(parts, migW.part)
	}
	var labeler *labelsPart
	if sink != nil {
		labeler = newLabelsPartFor(f, backend, sink, log.With("part", "labels"))
		parts = append(parts, part{name: "labels", run: labeler.run})
	}
	if f.metricsAddr != "" {
		ps, reg, err := metricsParts(ctx, f, backend, node, apiConfig, healthSrc, probe, podsOnNode, served, quarantine, log)
		if err != nil {
			return err
		}
		plugin.Registerer = reg
		parts = append(parts, ps...)
	} else {
		log.Info("metrics are off (--metrics-addr is empty)")
	}
	api, apiWatch, err := servingAPI(ctx, f, apiConfig, node, log)
	if err != nil {
		return err
	}
	if !api.DevicePlugin() {
		plugin.Withhold = true
		probe.withheld.Store(true)
	}
	parts = append(parts, apiWatch...)
	if f.dra.enabled && api.DRA() {
		p, l, err := draParts(ctx, f, backend, node, apiConfig, healthSrc, served, plugin.MPSRunner, link, log.With("part", "dra"))
		if err != nil {
			return err
		}
		plugin.Ledger = l
		parts = append(parts, p)
	}

	fo := newFollowers(served, migW, labeler, quarantine)
	plugin.OnResources, plugin.OnConfig = fo.onResources, fo.onConfig
	parts = append(parts, devicePluginPart(plugin))

	if err := runParts(ctx, log, parts); err != nil {
		if sw, ok := isGPUAPISwitch(err); ok {
			return sw
		}
		return fmt.Errorf("agent stopped: %w", err)
	}
	return nil
}

// followers fan what the device plugin serves out to the parts that
// follow it. RunPlugin calls onResources at start and after every reload
// that took effect, before the kubelet is sent the resources, and onConfig
// after; each calls its list in the order newFollowers documents.
type followers struct {
	resources []func([]*sharing.Resource)
	config    []func(*configv1.Config)
}

// newFollowers lists the followers in the order they are called (parts
// that are off are nil and left out):
//   - resources: the served snapshot first, so that every reader sees the
//     new devices; then the MIG part's health gate, which must know them
//     before the kubelet asks their health.
//   - config: the MIG part's strategy, then the labels (which describe
//     the sharing and MIG strategy served), then the quarantine's policy.
func newFollowers(served *servedResources, mig *migWiring, labeler *labelsPart, quarantine *quarantinePart) *followers {
	fo := &followers{resources: []func([]*sharing.Resource){served.store}}
	if mig != nil {
		fo.resources = append(fo.resources, mig.gate.setResources)
		fo.config = append(fo.config, mig.setConfig)
	}
	if labeler != nil {
		fo.config = append(fo.config, labeler.setConfig)
	}
	if quarantine != nil {
		fo.config = append(fo.config, quarantine.setConfig)
	}
	return fo
}

func (fo *followers) onResources(rs []*sharing.Resource) {
	for _, f := range fo.resources {
		f(rs)
	}
}

func (fo *followers) onConfig(c *configv1.Config) {
	for _, f := range fo.config {
		f(c)
	}
}

// agentStart is what the agent reads before it touches the GPUs.
type agentStart struct {
	node       string
	configFile string
	overrides  configv1.Overrides
	// selector, with --config-dir, picks the config by the node's label;
	// selectorAPI reads that label (nil without the API server).
	selector     *configSelector
	selectConfig func() (string, error)
	selectorAPI  *rest.Config
	// first is the config at start, checked before the GPUs are opened
	// so that a bad file fails fast with one message.
	first *pluginState
}

// readStart resolves the node's name and its config: overrides from the
// flags and the environment, the config file or the one the node's label
// picks from --config-dir.
func readStart(ctx context.Context, f *runFlags, log *slog.Logger) (*agentStart, error) {
	env, err := configv1.OverridesFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	st := &agentStart{node: nodeName(f.backend.NodeName), configFile: f.configFile, overrides: f.overrides().Over(env)}
	if st.configFile == "" {
		st.configFile = os.Getenv(EnvConfigFile)
	}
	if f.configDir != "" {
		if st.selector, err = newConfigSelector(f.configDir, f.configDefault, f.configFallback, log.With("part", "config")); err != nil {
			return nil, &cliutil.UsageError{Err: err}
		}
		if cfg, err := restConfig(f.kubeconfig); err != nil {
			log.Info("the node's "+ConfigLabel+" label is not read: the API server is not configured", "reason", err)
		} else {
			if err := st.selector.readLabel(ctx, cfg, st.node); err != nil {
				return nil, fmt.Errorf("refusing to start: %w", err)
			}
			st.selectorAPI = cfg
		}
		st.selectConfig = st.selector.Select
	}
	st.first, err = loadState(PluginOptions{ConfigFile: st.configFile, SelectConfig: st.selectConfig, Overrides: st.overrides}, nil, log)
	if err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	return st, nil
}

// openBackend opens the one GPU backend every part shares. When NVML does
// not start, the Node's condition says so before the agent exits.
func openBackend(ctx context.Context, f *runFlags, node string, first *configv1.Config, log *slog.Logger) (gpu.Backend, error) {
	bo := f.backend.WithEnv()
	bo.NodeName = node
	bo.FailOnInitError = first.FailOnInitError()
	bo.Logger = log
	backend, err := backends.Open(ctx, bo)
	if errors.Is(err, backends.ErrUnknownProfile) {
		return nil, &cliutil.UsageError{Err: fmt.Errorf("--simulate: %w", err)}
	}
	if err != nil {
		if bo.Simulate == "" {
			err = fmt.Errorf("opening NVML (set --fail-on-init-error=false to run with no GPUs): %w", err)
			reportDriverNotLoaded(ctx, f, node, err, log)
			return nil, err
		}
		return nil, fmt.Errorf("starting the simulated node: %w", err)
	}
	return backend, nil
}

// hostDevRoot is where the host checks look for device nodes: simulated
// GPUs have none to look for.
func hostDevRoot(backend gpu.Backend) string {
	if strings.HasPrefix(backend.Name(), "sim") {
		return ""
	}
	return "/"
}

// nodeAPI returns the API server's config and a watch of the pods bound
// to the node; both nil when the API server is not configured, and then
// pods get the GPUs their resource prefers.
func nodeAPI(ctx context.Context, f *runFlags, node string, log *slog.Logger) (*rest.Config, *nodePods, error) {
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		log.Info("pods get the GPUs their resource prefers: the API server is not configured, so gpuplane-scheduler's choices cannot be read", "reason", err)
		return nil, nil, nil
	}
	cfg.UserAgent = name
	pods, err := watchNodePods(ctx, cfg, node, log.With("part", "steer"))
	if err != nil {
		return nil, nil, err
	}
	return cfg, pods, nil
}

// recorderPart records on each pod the GPUs the kubelet gave it; false
// without a PodResources socket.
func recorderPart(socket string, served *servedResources, pods *nodePods, gpus int, log *slog.Logger) (part, bool) {
	if socket == "" {
		log.Info("the GPUs pods hold are not recorded on them (--pod-resources-socket is empty): gpuplane-scheduler keeps its own choices as the truth")
		return part{}, false
	}
	rec := steer.NewRecorder(metrics.NewSocketPodResources(socket), served.load, pods.cached, pods.patchHeld, gpus, log)
	return part{name: "record", run: rec.Run}, true
}

// conditionPart keeps the GPUReady condition on the Node.
func conditionPart(api *rest.Config, node string, gpus int, probe *probes, log *slog.Logger) (part, error) {
	c, err := newNodeClient(api)
	if err != nil {
		return part{}, err
	}
	w := newConditionWriter(c, node, log)
	return part{name: "condition", run: func(ctx context.Context) error {
		return w.run(ctx, func() nodeCondition { return checkNode(gpus, probe) })
	}}, nil
}

// migWiring is the MIG part and what the device plugin feeds it.
type migWiring struct {
	part part
	// gate is the device plugin's health source while GPUs are
	// re-partitioned; it learns the devices the plugin serves.
	gate *migGate
	// strategy follows the MIG strategy of the config the plugin serves.
	strategy atomic.Pointer[string]
}

// setConfig follows the config the plugin serves (followers).
func (m *migWiring) setConfig(cfg *configv1.Config) {
	st := cfg.MIGStrategy()
	m.strategy.Store(&st)
}

// migParts builds declarative MIG (--mig-config-map), which needs the
// API server and the PodResources socket.
func migParts(ctx context.Context, f *runFlags, api *rest.Config, node string, backend gpu.Backend, pods *nodePods, served *servedResources,
	link *draLink, reload chan<- struct{}, log *slog.Logger) (*migWiring, error) {
	if api == nil || f.podResourcesSocket == "" {
		return nil, cliutil.Usagef("--mig-config-map needs the API server (--kubeconfig or in-cluster) and --pod-resources-socket: the agent reads the node's %s label and finds the pods on each GPU it changes", gpunode.LabelMIGConfig)
	}
	c, err := newNodeClient(api)
	if err != nil {
		return nil, err
	}
	w := &migWiring{gate: newMIGGate(reload)}
	ns, cm, _ := strings.Cut(f.migConfigMap, "/")
	mc := &migCluster{node: node, namespace: ns, configMap: cm, key: f.migConfigKey, client: c, cond: nodecond.New(c, node, gpunode.ConditionMIGConfig, migFieldManager),
		podRes: metrics.NewSocketPodResources(f.podResourcesSocket), pods: pods, served: served.load,
		triggerOut: make(chan struct{}, 1), dra: link}
	if mc.events, err = newEventRecorder(ctx, api, node); err != nil {
		return nil, err
	}
	strategy := func() string {
		if p := w.strategy.Load(); p != nil {
			return *p
		}
		return ""
	}
	w.part = newMIGPart(claimGuard{Hardware: backend, link: link}, mc, migDevices{gate: w.gate, link: link, log: log}, strategy, f.migEvictTimeout, log)
	return w, nil
}

// newLabelsPartFor builds the labels part; --labels-interval, when given,
// overrides the config's interval.
func newLabelsPartFor(f *runFlags, backend gpu.Backend, sink labels.Sink, log *slog.Logger) *labelsPart {
	var interval *time.Duration
	if f.changedConfig("labels-interval") {
		interval = &f.labelsInterval
	}
	return newLabelsPart(backend, sink, interval, log)
}

// metricsParts builds the /metrics endpoint and, with the API server and
// the PodResources socket, the usage watch. The returned registry takes
// the health monitor's series (and the quarantine's), served beside the
// exporter's.
func metricsParts(ctx context.Context, f *runFlags, backend gpu.Backend, node string, api *rest.Config, health *monitorHealth, probe *probes,
	pods *nodePods, served *servedResources, quarantine *quarantinePart, log *slog.Logger) ([]part, prometheus.Registerer, error) {
	mlog := log.With("part", "metrics")
	healthReg := prometheus.NewRegistry()
	if err := healthReg.Register(versionmetric.New(version.Get())); err != nil {
		return nil, nil, fmt.Errorf("registering the build info metric: %w", err)
	}
	if quarantine != nil {
		if err := quarantine.register(healthReg); err != nil {
			return nil, nil, err
		}
	}
	shares := newShareBook(backend, served.load, mlog)
	if pods != nil {
		shares.charged = pods.chargedShare
	}
	handler, exporter, err := newMetricsHandler(f, backend, node, health, shares.of, pods, mlog, healthReg)
	if err != nil {
		return nil, nil, err
	}
	var parts []part
	if pods != nil && f.podResourcesSocket != "" {
		w, err := newOverLimitWatch(ctx, api, exporter.Usage, pods, node, f.overLimit, f.overLimitGrace, log.With("part", "usage"))
		if err != nil {
			return nil, nil, err
		}
		parts = append(parts, part{name: "usage", run: w.run})
	} else if f.overLimit == OverLimitEvict {
		return nil, nil, cliutil.Usagef("--gpu-memory-over-limit=evict needs the API server (--kubeconfig or in-cluster) and --pod-resources-socket")
	}
	handler = metrics.WithProbes(handler, probe.ready, probe.live)
	parts = append(parts, part{name: "metrics", run: func(ctx context.Context) error {
		return metrics.ServeWeb(ctx, f.metricsAddr, f.webConfigFile, handler, mlog, f.metricsReady)
	}})
	return parts, healthReg, nil
}

// draParts builds the DRA driver and the ledger it shares with the device
// plugin, and fills link so that the quarantine and the MIG part see its
// claims.
func draParts(ctx context.Context, f *runFlags, backend gpu.Backend, node string, api *rest.Config, health *monitorHealth, served *servedResources,
	mpsRunner mps.Runner, link *draLink, log *slog.Logger) (part, *ledger.Ledger, error) {
	l := ledger.New()
	p, driver, err := draPart(ctx, f, backend, node, api, health, l, served, mpsRunner, log)
	if err != nil {
		return part{}, nil, err
	}
	claims, err := kubernetes.NewForConfig(api)
	if err != nil {
		return part{}, nil, fmt.Errorf("building the API client that reads ResourceClaims: %w", err)
	}
	link.driver, link.ledger, link.client = driver, l, claims
	return p, l, nil
}

// servingAPI decides once, at start, through which API the node's GPUs
// are served (--gpu-api, overridden by the Node's label), and with the API
// server watches that label: a change restarts the agent's parts.
func servingAPI(ctx context.Context, f *runFlags, api *rest.Config, node string, log *slog.Logger) (gpunode.GPUAPI, []part, error) {
	served, err := gpuAPIFor(ctx, f, api, node, log)
	if err != nil {
		return "", nil, err
	}
	if !served.DevicePlugin() {
		log.Info("the device plugin advertises no resource: the node's GPUs are served through DRA only", "gpuAPI", served)
	}
	if f.dra.enabled && !served.DRA() {
		log.Info("the DRA driver is off on this node: its GPUs are served through the device plugin only", "gpuAPI", served)
	}
	if api == nil {
		return served, nil, nil
	}
	p, err := gpuAPIWatch(api, f, node, served, log.With("part", "gpu api"))
	if err != nil {
		return "", nil, err
	}
	return served, []part{p}, nil
}

// devicePluginPart serves the kubelet.
func devicePluginPart(o PluginOptions) part {
	return part{name: "device plugin", run: func(ctx context.Context) error {
		err := RunPlugin(ctx, o)
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%w (the agent runs as root on a node; elsewhere point --kubelet-dir and --cdi-dir at writable directories, or set --cdi-dir \"\" to write no CDI specs)", err)
		}
		return err
	}}
}
