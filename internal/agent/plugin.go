package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/mps"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// PluginOptions are the device-plugin part's settings once flags, the
// environment and defaults are resolved.
type PluginOptions struct {
	// ConfigFile is the v1 config; empty means defaults and overrides only.
	ConfigFile string
	// SelectConfig, when set, names the config file instead of ConfigFile
	// at start and at every reload (--config-dir).
	SelectConfig func() (string, error)
	// Overrides are flag settings over environment settings.
	Overrides configv1.Overrides
	// KubeletDir is the kubelet's device-plugin directory.
	KubeletDir string
	// CDIDir receives a CDI spec per resource; empty writes none.
	CDIDir string
	// Backend is the node's GPUs.
	Backend gpu.Backend
	// HealthCheckInterval is how often GPUs are probed.
	HealthCheckInterval time.Duration
	// LookupEnv reads the environment (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Reload receives a value for every SIGHUP, config choice change and
	// MIG layout change: the config is read and the GPUs listed again.
	Reload <-chan struct{}
	// MPSRunner runs MPS control daemons; nil uses the real binary.
	MPSRunner mps.Runner
	// Registerer receives the health monitor's gpuplane_* metrics; nil
	// registers none.
	Registerer prometheus.Registerer
	// Steer, when set, gives pods that gpuplane-scheduler placed the GPUs
	// it chose (podSteerer); nil leaves every choice to the resources'
	// preferences.
	Steer deviceplugin.Steerer
	// OnHealth, when set, is given the health monitor once it exists, so
	// that other parts (metrics, node conditions) can read its Status.
	OnHealth func(*health.Monitor)
	// OnManager, when set, is given the device-plugin manager once it
	// exists, for the agent's readiness probe.
	OnManager func(*deviceplugin.Manager)
	// OnConfig, when set, is given the config the plugin serves: once at
	// start and again after every reload that took effect, so that other
	// parts (labels) describe the same sharing and MIG strategy.
	OnConfig func(*configv1.Config)
	// OnResources, when set, is given the resources the plugin serves,
	// at start and after every reload that took effect, before the kubelet
	// is sent them.
	OnResources func([]*sharing.Resource)
	// WrapHealth, when set, wraps the health the kubelet's device health
	// comes from (the MIG part withdraws the devices of GPUs it
	// re-partitions this way).
	WrapHealth func(deviceplugin.HealthSource) deviceplugin.HealthSource
	// Ledger, when set, is the node's record of held devices that the DRA
	// driver shares: devices a claim holds are withdrawn from the kubelet
	// (reported unhealthy) and Allocate records what it hands out.
	Ledger *ledger.Ledger
	// Withhold advertises no resource to the kubelet (the node's GPUs are
	// served through DRA only, gpunode.LabelGPUAPI); health, CDI specs and
	// OnResources go on as usual.
	Withhold bool
	Logger   *slog.Logger
}

// pluginState is what one good config produced.
type pluginState struct {
	cfg       *configv1.Config
	resources []*sharing.Resource
}

// RunPlugin runs the device plugin until ctx ends: it loads the config,
// builds the resources from the backend's GPUs, writes CDI specs, starts
// health monitoring and MPS daemons, and serves the kubelet. A config that
// is invalid at start is an error; one that becomes invalid on reload is
// logged and the last good one keeps running.
func RunPlugin(ctx context.Context, o PluginOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.LookupEnv == nil {
		o.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if o.Backend == nil {
		return errors.New("device plugin: no GPU backend")
	}
	devices, err := o.Backend.Devices(ctx)
	if err != nil {
		return fmt.Errorf("listing GPUs: %w", err)
	}
	topo, err := o.Backend.Topology(ctx)
	if err != nil {
		log.Warn("GPU topology cannot be read; whole GPUs are chosen by index", "err", err)
		topo = nil
	}
	state, err := loadState(o, devices, log)
	if err != nil {
		return err
	}
	var writer *cdi.Writer
	if o.CDIDir != "" {
		writer, err = cdi.NewWriter(cdi.Options{Dir: o.CDIDir, DevRoot: devRoot(state.cfg), MPSRoot: state.cfg.MPSRoot()})
		if err != nil {
			return err
		}
		if err := writeSpecs(writer, nil, state.resources, log); err != nil {
			return err
		}
	}
	policy, err := health.NewPolicy(state.cfg.Health, o.LookupEnv)
	if err != nil {
		return fmt.Errorf("reading the health-check policy: %w", err)
	}
	monitor, err := health.NewMonitor(o.Backend, devices, health.Options{Policy: policy, CheckInterval: o.HealthCheckInterval, Registerer: o.Registerer, Logger: log.With("part", "health")})
	if err != nil {
		return err
	}
	if o.OnHealth != nil {
		o.OnHealth(monitor)
	}
	if o.OnConfig != nil {
		o.OnConfig(state.cfg)
	}
	if o.OnResources != nil {
		o.OnResources(state.resources)
	}
	var pluginHealth deviceplugin.HealthSource = monitor
	if o.Ledger != nil {
		pluginHealth = newLedgerHealth(monitor, o.Ledger)
	}
	if o.WrapHealth != nil {
		pluginHealth = o.WrapHealth(pluginHealth)
	}
	manager, err := deviceplugin.NewManager(deviceplugin.ManagerOptions{Dir: o.KubeletDir, Health: pluginHealth, Steer: o.Steer, Topology: topo, Logger: log.With("part", "deviceplugin")})
	if err != nil {
		return err
	}
	if o.OnManager != nil {
		o.OnManager(manager)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- monitor.Run(ctx) }()
	go func() { errs <- manager.Run(ctx, pluginSet(state, o.Withhold)) }()
	daemons := startMPS(ctx, o, state, log)
	// waitPart waits for a part to end after the context is cancelled.
	waitPart := func() {
		if err := <-errs; err != nil {
			log.Error("device plugin part stopped with an error", "err", err)
		}
	}
	log.Info("device plugin running", "backend", o.Backend.Name(), "resources", sharing.Names(state.resources), "kubeletDir", o.KubeletDir)
	for {
		select {
		case <-ctx.Done():
			// CDI specs stay: containers that restart while the agent is
			// down still resolve their devices.
			daemons.stop()
			waitPart()
			waitPart()
			return nil
		case err := <-errs:
			stopping := ctx.Err() != nil
			cancel()
			daemons.stop()
			waitPart()
			if err == nil && stopping {
				return nil
			}
			if err == nil {
				err = errors.New("device plugin part stopped unexpectedly")
			}
			return err
		case <-o.Reload:
			// The GPUs are read again: a MIG layout may have changed.
			if fresh, err := o.Backend.Devices(ctx); err != nil {
				log.Error("listing GPUs on reload; keeping the last list", "err", err)
			} else {
				devices = fresh
			}
			next, err := loadState(o, devices, log)
			if err != nil {
				log.Error("config reload failed; keeping the last good config", "err", err)
				continue
			}
			if writer != nil {
				if err := writeSpecs(writer, state.resources, next.resources, log); err != nil {
					log.Error("writing CDI specs after reload; keeping the last good config", "err", err)
					continue
				}
			}
			daemons.stop()
			state = next
			// The health sources learn the new devices before the
			// kubelet is sent them: a device they do not know is
			// reported unhealthy.
			if o.OnResources != nil {
				o.OnResources(state.resources)
			}
			manager.Update(pluginSet(state, o.Withhold))
			daemons = startMPS(ctx, o, state, log)
			if o.OnConfig != nil {
				o.OnConfig(state.cfg)
			}
			log.Info("config reloaded", "resources", sharing.Names(state.resources))
		}
	}
}

func pluginSet(s *pluginState, withhold bool) deviceplugin.Set {
	if withhold {
		return deviceplugin.Set{Contract: deviceplugin.ContractFromConfig(s.cfg)}
	}
	return deviceplugin.Set{Resources: s.resources, Contract: deviceplugin.ContractFromConfig(s.cfg)}
}

func devRoot(cfg *configv1.Config) string {
	if cfg.Flags.NvidiaDevRoot != nil {
		return *cfg.Flags.NvidiaDevRoot
	}
	return cfg.DriverRoot()
}

// loadState reads and validates the config and builds the resources.
func loadState(o PluginOptions, devices []gpu.Device, log *slog.Logger) (*pluginState, error) {
	if o.SelectConfig != nil {
		file, err := o.SelectConfig()
		if err != nil {
			return nil, err
		}
		o.ConfigFile = file
	}
	var in io.Reader = bytes.NewReader(nil)
	if o.ConfigFile != "" {
		// Load reads at most configv1.MaxBytes of it and refuses a larger
		// file without holding it in memory.
		f, err := os.Open(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("reading the config file: %w", err)
		}
		defer func() { _ = f.Close() }()
		in = f
	}
	cfg, err := configv1.Load(in, configv1.Options{Overrides: o.Overrides, Logger: log})
	if err != nil {
		if o.ConfigFile != "" {
			return nil, fmt.Errorf("%s: %w", o.ConfigFile, err)
		}
		return nil, err
	}
	rs, err := sharing.Build(cfg, devices)
	if err != nil {
		return nil, fmt.Errorf("building resources from the config and the node's GPUs: %w", err)
	}
	return &pluginState{cfg: cfg, resources: rs}, nil
}

// writeSpecs writes the specs of next and removes those of prev that are
// gone.
func writeSpecs(w *cdi.Writer, prev, next []*sharing.Resource, log *slog.Logger) error {
	keep := map[string]bool{}
	for _, r := range next {
		path, err := w.Write(r)
		if err != nil {
			return err
		}
		keep[path] = true
		log.Debug("wrote CDI spec", "resource", r.Name, "path", path)
	}
	for _, r := range prev {
		if !keep[w.Path(r)] {
			if err := w.Remove(r); err != nil {
				return err
			}
		}
	}
	return nil
}
