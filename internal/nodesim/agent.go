package nodesim

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// AgentConfig starts gpuplane-agent for the node.
type AgentConfig struct {
	// Binary is the gpuplane-agent executable; required.
	Binary string
	// Profile is the simulated node: dgxa100, dgxh100, ... or a profile
	// file; required.
	Profile string
	// ConfigFile is the agent's device plugin config (NVIDIA's v1 format:
	// time-slicing, MIG strategy); empty means none.
	ConfigFile string
	// MIGStrategy is passed as --mig-strategy when not empty.
	MIGStrategy string
	// Kubeconfig is passed as --kubeconfig, so the agent can label its
	// Node; empty leaves labels off.
	Kubeconfig string
	// MetricsAddr is passed as --metrics-addr; empty picks a free loopback
	// port.
	MetricsAddr string
	// DRA runs the agent's DRA driver (--dra) with its registration and
	// plugin sockets in the simulator's directory; needs Kubeconfig.
	DRA bool
	// ExtraArgs are appended to the agent's command line.
	ExtraArgs []string
	// LogPath receives the agent's output; empty means Dir/agent.log.
	LogPath string
}

// agentProcess is a running agent.
type agentProcess struct {
	child       *localcluster.Child
	metricsAddr string
}

// Backoff between agent restarts, doubling up to the maximum, as the
// kubelet restarts a DaemonSet's crashed container.
const (
	agentRestartDelay    = time.Second
	agentRestartMaxDelay = 30 * time.Second
)

// agentSupervisor keeps the agent running: when it exits while the
// simulator runs, it is started again after a backoff.
type agentSupervisor struct {
	cfg         Config
	log         *slog.Logger
	metricsAddr string
	cancel      context.CancelFunc
	done        chan struct{}

	mu       sync.Mutex
	proc     *agentProcess
	restarts int
	lastExit error
}

// superviseAgent starts the agent and keeps it running until stop.
func superviseAgent(cfg Config, log *slog.Logger) (*agentSupervisor, error) {
	p, err := startAgent(cfg, log)
	if err != nil {
		return nil, err
	}
	// Restarts keep the metrics address, so scrapers keep finding it.
	agentCfg := *cfg.Agent
	agentCfg.MetricsAddr = p.metricsAddr
	cfg.Agent = &agentCfg
	runCtx, cancel := context.WithCancel(context.Background())
	a := &agentSupervisor{cfg: cfg, log: log, metricsAddr: p.metricsAddr, cancel: cancel, done: make(chan struct{}), proc: p}
	go a.run(runCtx)
	return a, nil
}

func (a *agentSupervisor) current() *agentProcess {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc
}

func (a *agentSupervisor) restartCount() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.restarts, a.lastExit
}

func (a *agentSupervisor) run(ctx context.Context) {
	defer close(a.done)
	delay := agentRestartDelay
	for {
		p := a.current()
		started := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-p.child.Exited():
		}
		exitErr := p.child.ExitError()
		// Whatever the agent left in its process group goes too.
		if err := p.child.Stop(ctx, time.Second); err != nil {
			a.log.Warn("cleaning up after the agent", "err", err)
		}
		if time.Since(started) > 2*agentRestartMaxDelay {
			delay = agentRestartDelay
		}
		a.mu.Lock()
		a.lastExit = exitErr
		a.mu.Unlock()
		a.log.Warn("gpuplane-agent exited; restarting it", "err", exitErr, "in", delay)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, agentRestartMaxDelay)
			next, err := startAgent(a.cfg, a.log)
			if err == nil {
				a.mu.Lock()
				a.proc = next
				a.restarts++
				a.mu.Unlock()
				break
			}
			a.log.Error("restarting gpuplane-agent", "err", err, "retryIn", delay)
		}
	}
}

// stop ends supervision and stops the running agent.
func (a *agentSupervisor) stop(ctx context.Context) error {
	a.cancel()
	<-a.done
	return a.current().child.Stop(ctx, 10*time.Second)
}

// startAgent starts the agent as a child process of its own process group,
// pointed at the simulator's directory.
func startAgent(cfg Config, log *slog.Logger) (*agentProcess, error) {
	a := cfg.Agent
	if a.Binary == "" || a.Profile == "" {
		return nil, fmt.Errorf("nodesim config: Agent: Binary and Profile are required")
	}
	args := []string{
		"--simulate", a.Profile,
		// The simulated GPUs keep their MIG layout across agent restarts,
		// as real ones do.
		"--simulate-state", filepath.Join(cfg.Dir, "gpu-state.json"),
		"--kubelet-dir", cfg.Dir,
		"--node-name", cfg.NodeName,
		"--cdi-dir", filepath.Join(cfg.Dir, "cdi"),
		// The simulated node has no minutes to wait for a GPU that fell off
		// the bus; seconds keep health changes visible in tests.
		"--health-check-interval", "2s",
	}
	if a.ConfigFile != "" {
		args = append(args, "--config", a.ConfigFile)
	}
	if a.MIGStrategy != "" {
		args = append(args, "--mig-strategy", a.MIGStrategy)
	}
	proc := &agentProcess{}
	if !hasFlag(a.ExtraArgs, "metrics-addr") {
		addr := a.MetricsAddr
		if addr == "" {
			var err error
			if addr, err = freeLoopbackAddr(); err != nil {
				return nil, err
			}
		}
		proc.metricsAddr = addr
		args = append(args, "--metrics-addr", addr)
	}
	if a.Kubeconfig != "" && !hasFlag(a.ExtraArgs, "kubeconfig") {
		args = append(args, "--kubeconfig", a.Kubeconfig)
	}
	if a.DRA {
		args = append(args, "--dra", "--dra-registrar-dir", filepath.Join(cfg.Dir, "plugins_registry"),
			"--dra-plugin-dir", filepath.Join(cfg.Dir, "plugins", "gpu.gpuplane.io"))
	}
	if !hasFlag(a.ExtraArgs, "pod-resources-socket") {
		args = append(args, "--pod-resources-socket", filepath.Join(cfg.Dir, "pod-resources", "kubelet.sock"))
	}
	args = append(args, a.ExtraArgs...)
	logPath := a.LogPath
	if logPath == "" {
		logPath = filepath.Join(cfg.Dir, "agent.log")
	}
	child, err := localcluster.StartChild("gpuplane-agent "+cfg.NodeName, a.Binary, args, logPath)
	if err != nil {
		return nil, err
	}
	proc.child = child
	log.Info("agent started", "pid", child.Pid(), "profile", a.Profile, "log", logPath, "args", strings.Join(args, " "))
	return proc, nil
}

func hasFlag(args []string, name string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		return a == "--"+name || strings.HasPrefix(a, "--"+name+"=")
	})
}

// freeLoopbackAddr returns a loopback address with a port free right now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port for the agent's metrics: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("finding a free port for the agent's metrics: %w", err)
	}
	return addr, nil
}
