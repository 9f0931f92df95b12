package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/labels"
)

// Where --labels sends the GPU feature labels.
const (
	labelsNode = "node"
	labelsFile = "file"
	labelsNone = "none"
)

// defaultLabelsInterval is how often labels are rewritten when neither the
// flag nor the config file says.
const defaultLabelsInterval = time.Minute

// DefaultFeatureFile is where --labels=file writes by default: gpuplane's
// own file in node-feature-discovery's local features directory.
const DefaultFeatureFile = "/etc/kubernetes/node-feature-discovery/features.d/gpuplane"

// labelsSink chooses the labels' sink from the flags. It returns a nil
// sink, and logs why, when labels are off.
func labelsSink(f *runFlags, node string, log *slog.Logger) (labels.Sink, error) {
	switch f.labels {
	case labelsNone:
		log.Info("GPU feature labels are off (--labels=none)")
		return nil, nil
	case labelsFile:
		return labels.NewFeatureFileSink(f.labelsFile)
	case "", labelsNode:
	default:
		return nil, cliutil.Usagef("--labels: %q is not a destination; want node, file or none", f.labels)
	}
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		if f.labels == labelsNode {
			return nil, cliutil.Usagef("--labels=node needs the API server: %w; pass --kubeconfig, run in a pod, or choose --labels=file or none", err)
		}
		log.Warn("GPU feature labels are off: the API server is not configured; pass --kubeconfig or run in a pod to label the Node, or --labels=file to write a node-feature-discovery features file", "reason", err)
		return nil, nil
	}
	cfg.UserAgent = name
	nodes, err := newNodeClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client for labels: %w", err)
	}
	return labels.NewNodeSink(nodes, node, labels.DefaultFieldManager)
}

// restConfig reads kubeconfig, else the files $KUBECONFIG names, else the
// pod's in-cluster config; never ~/.kube/config, so an agent started by
// hand without a kubeconfig cannot reach whatever cluster its user works on.
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		rules.Precedence = nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		if kubeconfig != "" {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return nil, fmt.Errorf("no --kubeconfig, $KUBECONFIG or in-cluster config: %w", err)
	}
	return cfg, nil
}

// labelsConfig is what the labels need of the device plugin's config
// (labels.FromDevicePluginConfig).
func labelsConfig(cfg *configv1.Config) labels.Config { return labels.FromDevicePluginConfig(cfg) }

// labelsInterval is the time between labelling passes: the flag when
// given, else GPU Feature Discovery's settings in the config file
// (flags.gfd.oneshot, flags.gfd.sleepInterval), else def. 0 means once.
func labelsInterval(flag *time.Duration, cfg *configv1.Config, def time.Duration) time.Duration {
	switch gfd := cfg.Flags.GFD; {
	case flag != nil:
		return *flag
	case gfd.Oneshot != nil && *gfd.Oneshot:
		return 0
	case gfd.SleepInterval != nil && gfd.SleepInterval.Duration > 0:
		return gfd.SleepInterval.Duration
	}
	return def
}

// labelsRun is what one labelling run needs from the config.
type labelsRun struct {
	cfg      labels.Config
	interval time.Duration // 0: once per config
}

// labelsPart labels the node with the config the device plugin serves:
// it waits for the plugin's first config, then labels once or on an
// interval, and starts over with a new labeler set whenever a reload
// changes the config. Failures to write are retried with backoff by the
// labels Runner, so an unreachable API server never stops the agent.
type labelsPart struct {
	inv  gpu.Inventory
	sink labels.Sink
	// flagInterval is --labels-interval when given, nil otherwise.
	flagInterval *time.Duration
	log          *slog.Logger
	configs      chan labelsRun
}

func newLabelsPart(inv gpu.Inventory, sink labels.Sink, flagInterval *time.Duration, log *slog.Logger) *labelsPart {
	return &labelsPart{inv: inv, sink: sink, flagInterval: flagInterval, log: log, configs: make(chan labelsRun, 1)}
}

// setConfig hands the part a new config; only the latest one is kept.
func (p *labelsPart) setConfig(cfg *configv1.Config) {
	lc := labelsRun{cfg: labelsConfig(cfg), interval: labelsInterval(p.flagInterval, cfg, defaultLabelsInterval)}
	for {
		select {
		case p.configs <- lc:
			return
		default:
		}
		select {
		case <-p.configs:
		default:
		}
	}
}

func (p *labelsPart) run(ctx context.Context) error {
	var run labelsRun
	select {
	case <-ctx.Done():
		return nil
	case run = <-p.configs:
	}
	for {
		ls, err := labels.New(run.cfg)
		if err != nil {
			return fmt.Errorf("building the labelers from the device plugin config: %w", err)
		}
		r, err := labels.NewRunner(labels.RunnerOptions{Inventory: p.inv, Labelers: ls, Sink: p.sink, Interval: run.interval, Logger: p.log})
		if err != nil {
			return err
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		once := run.interval == 0 // run is reassigned below while r runs
		go func() {
			if once {
				done <- r.Once(runCtx)
				return
			}
			done <- r.Run(runCtx)
		}()
		var runErr error
		select {
		case <-ctx.Done():
			cancel()
			if err := <-done; err != nil {
				p.log.Debug("labels runner stopped", "err", err)
			}
			return nil
		case run = <-p.configs:
			cancel()
			if err := <-done; err != nil {
				p.log.Debug("labels runner replaced", "err", err)
			}
			p.log.Info("device plugin config changed; relabelling")
			continue
		case runErr = <-done:
			cancel()
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case runErr != nil:
			return runErr
		case run.interval != 0:
			return errors.New("the labels runner stopped unexpectedly")
		}
		// Labelled once: wait for the next config or the end.
		select {
		case <-ctx.Done():
			return nil
		case run = <-p.configs:
			p.log.Info("device plugin config changed; relabelling")
		}
	}
}
