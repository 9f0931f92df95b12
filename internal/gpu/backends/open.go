package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/nvml"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// EnvSimulate names a simulated profile when --simulate is not given.
const EnvSimulate = gpunode.EnvSimulate

// Options choose and configure a backend.
type Options struct {
	// Simulate names a simulated profile (dgxh100, ...) or a profile file.
	// Empty means the real GPUs through NVML.
	Simulate string
	// SimulateState, with Simulate, is a file that keeps the simulated
	// GPUs' MIG layout across restarts (sim.Options.StateFile).
	SimulateState string
	// SimulateFabric, with Simulate, is the multi-node NVLink fabric the
	// simulated GPUs report, "<cluster UUID>.<clique ID>" as the
	// nvidia.com/gpu.clique label shows it: the NVL72 rack the node sits
	// in. Empty keeps the profile's.
	SimulateFabric string
	// NodeName is the node the GPUs belong to. Simulated GPUs derive their
	// UUIDs from it.
	NodeName string
	// FailOnInitError makes an NVML start-up failure an error. When false,
	// the node gets the null backend (zero GPUs) and the reason is logged.
	FailOnInitError bool
	// NVMLLibrary overrides the path of libnvidia-ml.so.1.
	NVMLLibrary string
	// Logger receives the fallback warning; nil discards it.
	Logger *slog.Logger
}

// AddFlags registers the backend flags every agent command shares.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringVar(&o.Simulate, "simulate", o.Simulate, "simulate the node's GPUs instead of using NVML: a DGX (dgxa100, dgxh100, dgxh200, dgxb200), an NVL72 compute tray (gb200-nvl72, gb300-nvl72), a rented server (4xt4, 8xv100, 4xa10g, 8xl4, 8xl40s, 8xa100-80gb, 8xh100-pcie), or a profile YAML file (env "+EnvSimulate+")")
	fs.StringVar(&o.SimulateFabric, "simulate-fabric", o.SimulateFabric, "with --simulate of an NVL72 tray (gb200-nvl72, gb300-nvl72): the NVLink fabric its GPUs report, CLUSTER_UUID.CLIQUE_ID as nvidia.com/gpu.clique shows it, so that the trays of one simulated rack share it; empty keeps the profile's (env "+gpunode.EnvSimulateFabric+")")
	fs.StringVar(&o.SimulateState, "simulate-state", o.SimulateState, "with --simulate: a file that keeps the simulated GPUs' MIG mode and instances, so that a restarted agent finds the layout it left, as on real GPUs; empty forgets it")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of this node (default: $NODE_NAME, else the host name); simulated GPU UUIDs derive from it")
	fs.StringVar(&o.NVMLLibrary, "nvml-library", o.NVMLLibrary, "path of the NVML library (default: libnvidia-ml.so.1 from the loader's search path)")
}

// WithEnv returns o with Simulate and SimulateFabric taken from
// $GPUPLANE_SIMULATE and $GPUPLANE_SIMULATE_FABRIC where the flags did not
// set them.
func (o Options) WithEnv() Options {
	if o.Simulate == "" {
		o.Simulate = os.Getenv(EnvSimulate)
	}
	if o.SimulateFabric == "" {
		o.SimulateFabric = os.Getenv(gpunode.EnvSimulateFabric)
	}
	return o
}

// Open returns the backend the options select.
func Open(_ context.Context, o Options) (gpu.Backend, error) {
	o = o.WithEnv()
	node := o.NodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		node, _ = os.Hostname()
	}
	if o.Simulate == "" && o.SimulateFabric != "" {
		return nil, fmt.Errorf("--simulate-fabric %q: only simulated GPUs take a fabric; real ones report their own (add --simulate)", o.SimulateFabric)
	}
	if o.Simulate != "" {
		return openSim(o.Simulate, o.SimulateState, o.SimulateFabric, node)
	}
	b, err := nvml.Open(nvml.Options{LibraryPath: o.NVMLLibrary, Hostname: node})
	if err == nil {
		return b, nil
	}
	if o.FailOnInitError {
		return nil, err
	}
	if o.Logger != nil {
		o.Logger.Warn("NVML is unavailable; advertising no GPUs because failOnInitError is false", "err", err)
	}
	return &gpu.Null{Reason: err.Error()}, nil
}

// ErrUnknownProfile marks a --simulate value that is neither a built-in
// profile nor a file: a mistake in how the command was called.
var ErrUnknownProfile = errors.New("unknown simulated profile")

type unknownProfile struct{ error }

func (unknownProfile) Is(target error) bool { return target == ErrUnknownProfile }
func (u unknownProfile) Unwrap() error      { return u.error }

func openSim(profile, state, fabric, node string) (gpu.Backend, error) {
	opts := sim.Options{NodeName: node, StateFile: state}
	if fabric != "" {
		f, err := sim.ParseFabric(fabric)
		if err != nil {
			return nil, fmt.Errorf("--simulate-fabric: %w", err)
		}
		opts.Fabric = &f
	}
	p, err := sim.Load(profile)
	if err != nil {
		if _, statErr := os.Stat(profile); statErr != nil && !strings.ContainsAny(profile, "/.") {
			return nil, unknownProfile{err}
		}
		return nil, err
	}
	return sim.New(p, opts)
}
