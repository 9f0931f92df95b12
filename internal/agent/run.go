package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/nvml"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/health"
)

// EnvConfigFile names the config file when --config is not given.
const EnvConfigFile = "CONFIG_FILE"

// runFlags are the agent's own flags. Settings that the config file also
// has are pointers into flagOverrides, applied only when given.
type runFlags struct {
	configFile    string
	kubeletDir    string
	cdiDir        string
	simulate      string
	nodeName      string
	healthEvery   time.Duration
	logLevel      string
	migStrategy   string
	failOnInit    bool
	passDevSpecs  bool
	listStrategy  []string
	idStrategy    string
	driverRoot    string
	mpsRoot       string
	changedConfig func(name string) bool
}

func (f *runFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.configFile, "config", "", "device plugin config file, NVIDIA's v1 format (env "+EnvConfigFile+")")
	fs.StringVar(&f.kubeletDir, "kubelet-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory: sockets are served here and kubelet.sock is watched")
	fs.StringVar(&f.cdiDir, "cdi-dir", cdi.DefaultDir, "directory for the CDI spec of each resource; empty writes none")
	fs.StringVar(&f.simulate, "simulate", "", "simulate the node's GPUs instead of using NVML: dgxa100, dgxh100, dgxh200, dgxb200, or a profile YAML file")
	fs.StringVar(&f.nodeName, "node-name", "", "this node's name (default $NODE_NAME, else the host name); simulated GPU UUIDs derive from it")
	fs.DurationVar(&f.healthEvery, "health-check-interval", health.DefaultCheckInterval, "how often every GPU is probed, to notice lost GPUs and end probation")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.migStrategy, "mig-strategy", "", "MIG strategy: none, single or mixed (env "+configv1.EnvMIGStrategy+"; config flags.migStrategy)")
	fs.BoolVar(&f.failOnInit, "fail-on-init-error", true, "exit when NVML cannot start; when false, advertise no GPUs (env "+configv1.EnvFailOnInitError+")")
	fs.BoolVar(&f.passDevSpecs, "pass-device-specs", false, "pass /dev/nvidia* device specs to the kubelet (env "+configv1.EnvPassDeviceSpecs+")")
	fs.StringSliceVar(&f.listStrategy, "device-list-strategy", nil, "how containers learn their devices: envvar, volume-mounts, cdi-annotations, cdi-cri; comma-separated (env "+configv1.EnvDeviceListStrategy+")")
	fs.StringVar(&f.idStrategy, "device-id-strategy", "", "how devices are named to the runtime: uuid or index (env "+configv1.EnvDeviceIDStrategy+")")
	fs.StringVar(&f.driverRoot, "nvidia-driver-root", "", "where the driver's files and /dev are seen from the agent (env "+configv1.EnvNvidiaDriverRoot+")")
	fs.StringVar(&f.mpsRoot, "mps-root", "", "directory for MPS pipe and log directories (env "+configv1.EnvMPSRoot+")")
	f.changedConfig = func(name string) bool { return fs.Changed(name) }
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

Run without a sub-command, it serves the kubelet device plugin: one resource
per GPU kind and sharing mode (nvidia.com/gpu, nvidia.com/mig-<profile>,
<name>.shared), a CDI spec per resource, and health checking with recovery.

Settings come from, in order of precedence: a flag, then an environment
variable, then the config file (--config, NVIDIA's v1 format), then defaults.
SIGHUP reloads the config file, keeping the last good config when the new one
is invalid; SIGTERM stops cleanly and removes the plugin sockets.`
	root.Example = `  gpuplane-agent --simulate dgxh100 --kubelet-dir /tmp/dp --cdi-dir /tmp/cdi
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

func runAgent(ctx context.Context, f *runFlags, stderr io.Writer) error {
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	env, err := configv1.OverridesFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	overrides := f.overrides().Over(env)
	configFile := f.configFile
	if configFile == "" {
		configFile = os.Getenv(EnvConfigFile)
	}
	// Check the config before touching GPUs so a bad file fails fast with
	// one message.
	if _, err := loadState(PluginOptions{ConfigFile: configFile, Overrides: overrides}, nil, log); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	failOnInit := true
	if overrides.FailOnInitError != nil {
		failOnInit = *overrides.FailOnInitError
	}
	backend, err := openBackend(f.simulate, f.nodeName, failOnInit, log)
	if err != nil {
		return err
	}
	defer func() { _ = backend.Close() }()

	reload := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
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
	err = RunPlugin(ctx, PluginOptions{
		ConfigFile: configFile, Overrides: overrides, KubeletDir: f.kubeletDir, CDIDir: f.cdiDir,
		Backend: backend, HealthCheckInterval: f.healthEvery, LookupEnv: os.LookupEnv, Reload: reload, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	return nil
}

// openBackend picks the simulated node or NVML.
func openBackend(simulate, node string, failOnInit bool, log *slog.Logger) (gpu.Backend, error) {
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		node, _ = os.Hostname()
	}
	if simulate != "" {
		p, err := sim.Load(simulate)
		if err != nil {
			return nil, cliutil.Usagef("--simulate: %w", err)
		}
		b, err := sim.New(p, sim.Options{NodeName: node, Logger: log.With("part", "sim")})
		if err != nil {
			return nil, fmt.Errorf("starting the simulated node: %w", err)
		}
		return b, nil
	}
	b, err := nvml.Open(nvml.Options{Hostname: node})
	if err == nil {
		return b, nil
	}
	if failOnInit {
		return nil, fmt.Errorf("opening NVML (set --fail-on-init-error=false to run with no GPUs): %w", err)
	}
	log.Warn("NVML is unavailable; advertising no GPUs because failOnInitError is false", "err", err)
	return &gpu.Null{Reason: err.Error()}, nil
}
