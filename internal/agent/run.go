package agent

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/backends"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/metrics"
)

// EnvConfigFile names the config file when --config is not given.
const EnvConfigFile = "CONFIG_FILE"

// runFlags are the agent's own flags. Settings that the config file also
// has are pointers into flagOverrides, applied only when given.
type runFlags struct {
	configFile     string
	configDir      string
	configDefault  string
	configFallback string
	kubeletDir     string
	cdiDir         string
	backend        backends.Options
	healthEvery    time.Duration
	logLevel       string
	migStrategy    string
	failOnInit     bool
	passDevSpecs   bool
	listStrategy   []string
	idStrategy     string
	driverRoot     string
	mpsRoot        string
	changedConfig  func(name string) bool

	metricsAddr        string
	webConfigFile      string
	podResourcesSocket string
	procfs             string
	labels             string
	kubeconfig         string
	labelsInterval     time.Duration
	labelsFile         string
	overLimit          string
	overLimitGrace     time.Duration
	nodeCondition      bool
	simControlAddr     string
	migConfigMap       string
	migConfigKey       string
	migEvictTimeout    time.Duration
	dra                draFlags
	gpuAPI             string

	// metricsReady, when set, is given the metrics listener's address
	// (tests ask for port 0).
	metricsReady func(net.Addr)
}

func (f *runFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.configFile, "config", "", "device plugin config file, NVIDIA's v1 format (env "+EnvConfigFile+")")
	fs.StringVar(&f.configDir, "config-dir", "", "directory of named configs, one file each in NVIDIA's v1 format (a ConfigMap mounted as a volume): the node's "+ConfigLabel+" label picks one, else --config-default, else --config-fallback; a change of the label or of the chosen file reloads it (instead of --config)")
	fs.StringVar(&f.configDefault, "config-default", "", "with --config-dir: the config of a node without the "+ConfigLabel+" label")
	fs.StringVar(&f.configFallback, "config-fallback", FallbackNamed+","+FallbackSingle, "with --config-dir and no --config-default: for an unlabelled node, "+FallbackNamed+" picks the config named default, "+FallbackSingle+" the only config, tried in the order given")
	fs.StringVar(&f.kubeletDir, "kubelet-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory: sockets are served here and kubelet.sock is watched")
	fs.StringVar(&f.cdiDir, "cdi-dir", cdi.DefaultDir, "directory for the CDI spec of each resource; empty writes none")
	backends.AddFlags(fs, &f.backend)
	fs.DurationVar(&f.healthEvery, "health-check-interval", health.DefaultCheckInterval, "how often every GPU is probed, to notice lost GPUs and end probation")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.migStrategy, "mig-strategy", "", "MIG strategy: none, single or mixed (env "+configv1.EnvMIGStrategy+"; config flags.migStrategy)")
	fs.BoolVar(&f.nodeCondition, "node-condition", true, "keep the GPUReady condition on the Node (server-side apply to nodes/status): True when the GPUs are on offer, else the first failing check (driver, GPUs, device plugin, GPU events) with its fix; needs the API server")
	fs.BoolVar(&f.failOnInit, "fail-on-init-error", true, "exit when NVML cannot start; when false, advertise no GPUs (env "+configv1.EnvFailOnInitError+")")
	fs.BoolVar(&f.passDevSpecs, "pass-device-specs", false, "pass /dev/nvidia* device specs to the kubelet (env "+configv1.EnvPassDeviceSpecs+")")
	fs.StringSliceVar(&f.listStrategy, "device-list-strategy", nil, "how containers learn their devices: envvar, volume-mounts, cdi-annotations, cdi-cri; comma-separated (env "+configv1.EnvDeviceListStrategy+")")
	fs.StringVar(&f.idStrategy, "device-id-strategy", "", "how devices are named to the runtime: uuid or index (env "+configv1.EnvDeviceIDStrategy+")")
	fs.StringVar(&f.driverRoot, "nvidia-driver-root", "", "where the driver's files and /dev are seen from the agent (env "+configv1.EnvNvidiaDriverRoot+")")
	fs.StringVar(&f.mpsRoot, "mps-root", "", "directory for MPS pipe and log directories (env "+configv1.EnvMPSRoot+")")
	fs.StringVar(&f.metricsAddr, "metrics-addr", metrics.DefaultAddr, "address of the Prometheus /metrics endpoint (DCGM_FI_* and gpuplane_* series); empty turns metrics off")
	fs.StringVar(&f.webConfigFile, "web-config-file", "", "web configuration file for /metrics and /healthz in the format node_exporter's --web.config.file reads (Prometheus exporter-toolkit): TLS certificates, client-certificate auth, basic-auth users; empty serves plain HTTP")
	fs.StringVar(&f.podResourcesSocket, "pod-resources-socket", metrics.DefaultPodResourcesSocket, "the kubelet's PodResources socket: labels GPU series with their pods, serves container_gpu_allocation, and records on each pod the GPUs it holds (gpuplane.io/gpus-held); empty turns these off (when the socket is absent, gpuplane_podresources_up says so)")
	fs.StringVar(&f.procfs, "procfs", "/proc", "where the host's /proc is mounted; GPU processes are mapped to pods through /proc/<pid>/cgroup")
	fs.StringVar(&f.labels, "labels", "", "where GPU feature labels go: node (the Node, by server-side apply), file (a node-feature-discovery features file) or none; default node when --kubeconfig, $KUBECONFIG or an in-cluster config is available, else none")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file for labelling the Node, reading the GPUs gpuplane-scheduler chose for the node's pods and recording what they got (default: $KUBECONFIG, else the pod's in-cluster config)")
	fs.DurationVar(&f.labelsInterval, "labels-interval", defaultLabelsInterval, "how often the labels are rewritten; 0 labels once at start and after each config reload (config flags.gfd.sleepInterval, flags.gfd.oneshot)")
	fs.StringVar(&f.labelsFile, "labels-file", DefaultFeatureFile, "node-feature-discovery features file written by --labels=file")
	fs.StringVar(&f.overLimit, "gpu-memory-over-limit", OverLimitReport, "what happens to a pod whose processes use more GPU memory than the part of a GPU it asked for (time-slicing cannot enforce it): report (a Warning event on the pod and gpuplane_pod_gpu_memory_* series) or evict (also evict it through the Eviction API, PodDisruptionBudgets respected, once over for --gpu-memory-over-limit-grace); needs --metrics-addr, --pod-resources-socket and the API server")
	fs.DurationVar(&f.overLimitGrace, "gpu-memory-over-limit-grace", 30*time.Second, "how long a pod may stay over its GPU memory limit before --gpu-memory-over-limit=evict evicts it")
	fs.StringVar(&f.simControlAddr, "simulate-control-addr", "", "with --simulate: serve the simulated GPUs' fault controls (POST /xid?gpu=3&xid=79, /lose, /fail?op=ResetGPU, /clear) on this loopback address, for tests and demos")
	fs.StringVar(&f.migConfigMap, "mig-config-map", "", "NAMESPACE/NAME of a ConfigMap holding a mig-parted config (version: v1, mig-configs: ...): the node's "+gpunode.LabelMIGConfig+" label names one of its configs and the agent partitions the GPUs by it, evicting the pods of the GPUs that change first, and reports in "+gpunode.LabelMIGConfigState+" and the "+gpunode.ConditionMIGConfig+" condition; empty turns declarative MIG off; needs the API server and --pod-resources-socket")
	fs.StringVar(&f.migConfigKey, "mig-config-key", DefaultMIGConfigKey, "the key of --mig-config-map that holds the mig-parted config")
	fs.DurationVar(&f.migEvictTimeout, "mig-eviction-timeout", 5*time.Minute, "how long the pods on GPUs being re-partitioned may take to go (PodDisruptionBudgets respected) before the state says failed; the agent keeps retrying")
	f.dra.add(fs)
	fs.StringVar(&f.gpuAPI, "gpu-api", string(gpunode.GPUAPIBoth), "through which API the node's GPUs are served: both (device plugin and, with --dra, the DRA driver, from one ledger), dra (the device plugin advertises nothing; pods asking for nvidia.com/gpu or MIG resources are served through the DeviceClasses' extendedResourceName; needs --dra) or device-plugin (no DRA driver); the Node's "+gpunode.LabelGPUAPI+" label overrides it; when the label changes, the agent's parts stop and start again to serve through the new API, and a node moved off DRA keeps the driver until the claims prepared on it are unprepared")
	f.changedConfig = func(name string) bool { return fs.Changed(name) }
}

// validate checks the flags that configuration loading does not.
func (f *runFlags) validate() error {
	if f.overLimit != OverLimitReport && f.overLimit != OverLimitEvict {
		return cliutil.Usagef("--gpu-memory-over-limit: %q: want %s or %s", f.overLimit, OverLimitReport, OverLimitEvict)
	}
	if f.overLimitGrace < 0 || f.overLimitGrace > 24*time.Hour {
		return cliutil.Usagef("--gpu-memory-over-limit-grace: %s: want 0 to 24h", f.overLimitGrace)
	}
	if f.metricsAddr != "" {
		_, port, err := net.SplitHostPort(f.metricsAddr)
		if err != nil {
			return cliutil.Usagef("--metrics-addr: %q is not host:port (such as :9400 or 127.0.0.1:9400): %w", f.metricsAddr, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return cliutil.Usagef("--metrics-addr: port %q is not a number from 0 to 65535", port)
		}
	}
	if f.metricsAddr != "" {
		if st, err := os.Stat(f.procfs); err != nil || !st.IsDir() {
			return cliutil.Usagef("--procfs: %s is not a directory; point it at the host's /proc (mounted into the agent's pod)", f.procfs)
		}
	}
	switch f.labels {
	case "", labelsNode, labelsFile, labelsNone:
	default:
		return cliutil.Usagef("--labels: %q is not a destination; want node, file or none", f.labels)
	}
	if f.labelsInterval < 0 {
		return cliutil.Usagef("--labels-interval: must not be negative, got %v; 0 labels once", f.labelsInterval)
	}
	if f.configFile != "" && f.configDir != "" {
		return cliutil.Usagef("--config and --config-dir: give one of them (--config-dir picks a file of the directory by the node's %s label)", ConfigLabel)
	}
	if f.configDir == "" && (f.changedConfig("config-default") || f.changedConfig("config-fallback")) {
		return cliutil.Usagef("--config-default and --config-fallback choose among the configs of --config-dir, which is not given")
	}
	if f.migConfigMap != "" {
		ns, n, ok := strings.Cut(f.migConfigMap, "/")
		if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
			return cliutil.Usagef("--mig-config-map: %q: want NAMESPACE/NAME, such as gpuplane/default-mig-parted-config", f.migConfigMap)
		}
		if f.migConfigKey == "" {
			return cliutil.Usagef("--mig-config-key: must not be empty (the GPU Operator's ConfigMaps use config.yaml)")
		}
		if f.migEvictTimeout <= 0 || f.migEvictTimeout > 24*time.Hour {
			return cliutil.Usagef("--mig-eviction-timeout: %s: want more than 0 and at most 24h", f.migEvictTimeout)
		}
	}
	if f.labels == labelsFile && f.labelsFile == "" {
		return cliutil.Usagef("--labels=file needs --labels-file")
	}
	return nil
}

// overrides returns the settings given as flags.
func (f *runFlags) overrides() configv1.Overrides {
	var o configv1.Overrides
	if f.changedConfig("mig-strategy") {
		o.MIGStrategy = &f.migStrategy
	}
	if f.changedConfig("fail-on-init-error") {
		o.FailOnInitError = &f.failOnInit
	}
	if f.changedConfig("pass-device-specs") {
		o.PassDeviceSpecs = &f.passDevSpecs
	}
	if f.changedConfig("device-list-strategy") {
		o.DeviceListStrategy = f.listStrategy
	}
	if f.changedConfig("device-id-strategy") {
		o.DeviceIDStrategy = &f.idStrategy
	}
	if f.changedConfig("nvidia-driver-root") {
		o.NvidiaDriverRoot = &f.driverRoot
	}
	if f.changedConfig("mps-root") {
		o.MPSRoot = &f.mpsRoot
	}
	return o
}

// attachRun makes the root command run the agent when no sub-command is
// given.
func attachRun(root *cobra.Command) {
	f := &runFlags{}
	root.Long += `

Run without a sub-command, it runs these parts over one view of the GPUs:
  - the kubelet device plugin: one resource per GPU kind and sharing mode
    (nvidia.com/gpu, nvidia.com/mig-<profile>, <name>.shared), a CDI spec
    per resource, and health checking with recovery. It keeps retrying
    registration while no kubelet listens in --kubelet-dir.
  - Prometheus metrics on --metrics-addr (/metrics, dcgm-exporter's
    DCGM_FI_* names plus gpuplane_*), with pod, namespace and container from
    the kubelet's PodResources API and /proc/<pid>/cgroup under --procfs.
  - with --dra, the DRA driver gpu.gpuplane.io: ResourceSlices describing
    each GPU (and, on GPUs in MIG mode, every MIG profile at every
    placement, created when a claim is prepared), CDI devices for prepared
    ResourceClaims, one ledger with the device plugin so that no GPU is
    given twice.
  - GPU feature labels (GPU Feature Discovery's nvidia.com/gpu.product,
    ...) and the gpuplane.io/gpu-topology annotation, applied to the Node
    named by --node-name under the field manager gpuplane-agent, or written
    to a node-feature-discovery features file (--labels). The labels follow
    the sharing and MIG strategy of the config the device plugin serves.
  - GPU quarantine (with the API server): a critical fault takes the GPU
    out of service with the GPUQuarantine Node condition, the
    gpuplane.io/gpu-fault:NoSchedule taint when its XID class affects the
    node, eviction of the pods on that GPU, a reset and revalidation; the
    taint and condition are lifted when the GPU passes (config
    health.quarantine).
If a part cannot run, the agent stops the others and exits non-zero.

Settings come from, in order of precedence: a flag, then an environment
variable, then the config file (--config, NVIDIA's v1 format), then defaults.
SIGHUP reloads the config file, keeping the last good config when the new one
is invalid; SIGTERM stops cleanly and removes the plugin sockets.`
	root.Example = `  gpuplane-agent --simulate dgxh100 --kubelet-dir /tmp/dp --cdi-dir /tmp/cdi
  gpuplane-agent --simulate dgxh100 --kubelet-dir /tmp/dp --cdi-dir "" --metrics-addr 127.0.0.1:9400 --labels none
  gpuplane-agent --kubeconfig ~/.kube/config --node-name gpu-node-1 --labels-interval 0
  gpuplane-agent --config /etc/gpuplane/config.yaml
  MIG_STRATEGY=mixed gpuplane-agent --simulate dgxa100`
	f.add(root.Flags())
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error { return runAgent(cmd.Context(), f, cmd.ErrOrStderr()) }
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, cliutil.Usagef("--log-level: %q is not a level; want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// runAgent runs the agent's parts until ctx ends or one fails. When the
// node is to be served through another API (gpunode.LabelGPUAPI changed),
// the parts stop and start again, as after a restart of the agent: both
// the device plugin and the DRA driver rebuild from what the kubelet and
// their checkpoints say is held, so no GPU is given twice in between.
func runAgent(ctx context.Context, f *runFlags, stderr io.Writer) error {
	for {
		err := runAgentOnce(ctx, f, stderr)
		if _, ok := isGPUAPISwitch(err); !ok || ctx.Err() != nil {
			return err
		}
	}
}

// watchReload turns every SIGHUP into a value on the returned channel
// (coalesced) until ctx ends.
func watchReload(ctx context.Context, configFile string, log *slog.Logger) chan struct{} {
	reload := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the config", "file", configFile)
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		}
	}()
	return reload
}

// newMetricsHandler builds the exporter over the shared backend, with pod
// attribution from the kubelet's PodResources socket and device checkpoint
// and process-to-pod mapping under --procfs.
func newMetricsHandler(f *runFlags, backend gpu.Backend, node string, h metrics.HealthSource, shareOf func(namespace, pod, resource, id string) (float64, bool),
	pods *nodePods, log *slog.Logger, extra ...prometheus.Gatherer) (http.Handler, *metrics.Exporter, error) {
	var lister metrics.PodResourcesLister
	if f.podResourcesSocket != "" {
		lister = metrics.NewSocketPodResources(f.podResourcesSocket)
	} else {
		log.Info("pod attribution is off (--pod-resources-socket is empty)")
	}
	opts := metrics.Options{
		GPUs: backend, Hostname: node, PodResources: lister, ProcRoot: f.procfs, Health: h, ShareOf: shareOf, Logger: log,
		CheckpointPath: filepath.Join(f.kubeletDir, filepath.Base(metrics.DefaultCheckpointPath)),
	}
	if pods != nil {
		opts.MemoryLimitOf, opts.PodUID, opts.QueueOf = pods.memoryLimitOf, pods.uidOf, pods.queueOf
	}
	e, err := metrics.NewExporter(opts)
	if err != nil {
		return nil, nil, err
	}
	handler, err := metrics.NewHandler(e, extra...)
	return handler, e, err
}

// reportDriverNotLoaded says on the Node, before the agent exits, that
// NVML did not start, when the API server is configured; best effort.
func reportDriverNotLoaded(ctx context.Context, f *runFlags, node string, cause error, log *slog.Logger) {
	if !f.nodeCondition {
		return
	}
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return
	}
	c, err := newNodeClient(cfg)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w := newConditionWriter(c, node, log.With("part", "condition"))
	if err := w.set(ctx, nodeCondition{corev1.ConditionFalse, gpunode.ReasonDriverNotLoaded,
		fmt.Sprintf("%v. Fix: install the NVIDIA driver on the node (nvidia-smi must work there) and mount its libraries into the agent (--nvidia-driver-root), or label the node so that the agent does not run on it", cause)}); err != nil {
		log.Warn("the node condition could not be written", "err", err)
	}
}

// nodeName is the flag's value, else $NODE_NAME, else the host name: the
// name the kubelet registers the Node under by default.
func nodeName(flag string) string {
	if flag != "" {
		return flag
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

// newOverLimitWatch builds the usage watch: events through the API
// server, evictions when policy is OverLimitEvict.
func newOverLimitWatch(ctx context.Context, cfg *rest.Config, usage func(context.Context) (metrics.Usage, error), pods *nodePods,
	node, policy string, grace time.Duration, log *slog.Logger) (*usageWatch, error) {
	c, err := newNodeClient(cfg)
	if err != nil {
		return nil, err
	}
	recorder, err := newEventRecorder(ctx, cfg, node)
	if err != nil {
		return nil, err
	}
	var evict func(context.Context, *corev1.Pod) error
	if policy == OverLimitEvict {
		evict = c.evict
		log.Info("pods over their GPU memory limit are evicted", "grace", grace)
	}
	return newUsageWatch(usage, pods, recorder, evict, grace, log), nil
}

// newEventRecorder records events until ctx ends. Its client is its own:
// events wait for their client's rate limiter, and the requests that
// change the node (a MIG label, an eviction, the node's condition) must
// not queue behind them.
func newEventRecorder(ctx context.Context, cfg *rest.Config, node string) (record.EventRecorder, error) {
	c, err := newNodeClient(cfg)
	if err != nil {
		return nil, err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(eventSink{rest: c.rest})
	go func() { <-ctx.Done(); broadcaster.Shutdown() }()
	// Events name pods and Nodes only: a scheme of the core group is
	// enough.
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, err
	}
	return broadcaster.NewRecorder(sch, corev1.EventSource{Component: name, Host: node}), nil
}

// UsageWatchOptions configure RunUsageWatch.
type UsageWatchOptions struct {
	// Config reaches the API server; Node is the node whose pods are
	// watched.
	Config *rest.Config
	Node   string
	// Usage attributes the GPUs' use to pods (metrics.Exporter.Usage).
	Usage func(context.Context) (metrics.Usage, error)
	// Policy is OverLimitReport or OverLimitEvict; Grace how long a pod
	// may stay over before it is evicted.
	Policy string
	Grace  time.Duration
	// Interval between checks and Backoff after a refused eviction; 5s
	// and 1m when zero.
	Interval, Backoff time.Duration
	Logger            *slog.Logger
}

// RunUsageWatch runs the agent's usage part on a pod watch of its own
// until ctx ends: Warning events on pods over their GPU memory limit or
// using GPUs they were not given, and evictions under OverLimitEvict.
func RunUsageWatch(ctx context.Context, o UsageWatchOptions) error {
	log := cmp.Or(o.Logger, slog.Default())
	pods, err := watchNodePods(ctx, o.Config, o.Node, log)
	if err != nil {
		return err
	}
	w, err := newOverLimitWatch(ctx, o.Config, o.Usage, pods, o.Node, o.Policy, o.Grace, log)
	if err != nil {
		return err
	}
	if o.Interval > 0 {
		w.interval = o.Interval
	}
	if o.Backoff > 0 {
		w.backoff = o.Backoff
	}
	return w.run(ctx)
}
