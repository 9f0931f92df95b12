package mps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ControlBinary is the MPS control daemon's executable.
const ControlBinary = "nvidia-cuda-mps-control"

// ControlPipe is the named pipe the control daemon makes in its pipe
// directory (CUDA_MPS_PIPE_DIRECTORY), through which commands reach it.
const ControlPipe = "control"

// quitTimeout bounds a quit asked of a control daemon: a command sent to a
// pipe no daemon reads may wait for one forever.
const quitTimeout = 5 * time.Second

// Command is a process to run.
type Command struct {
	Path string
	Args []string
	Env  []string
}

// Process is a started long-running process.
type Process interface {
	// Wait blocks until the process exits.
	Wait() error
	// Kill ends the process.
	Kill() error
}

// Runner starts processes. ExecRunner is the real one.
type Runner interface {
	// Start starts a long-running process.
	Start(ctx context.Context, c Command) (Process, error)
	// Run runs a short command with stdin as its input and waits for it.
	Run(ctx context.Context, c Command, stdin string) error
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

var _ Runner = ExecRunner{}

// Start implements Runner.
func (ExecRunner) Start(ctx context.Context, c Command) (Process, error) {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", c.Path, err)
	}
	return execProcess{cmd}, nil
}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, c Command, stdin string) error {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running %s %q: %w: %s", c.Path, stdin, err, strings.TrimSpace(string(out)))
	}
	return nil
}

type execProcess struct{ cmd *exec.Cmd }

func (p execProcess) Wait() error { return p.cmd.Wait() }
func (p execProcess) Kill() error { return p.cmd.Process.Kill() }

// DaemonOptions describe one resource's daemon.
type DaemonOptions struct {
	// Resource names the resource in logs.
	Resource string
	// PipeDir and LogDir are CUDA_MPS_PIPE_DIRECTORY and
	// CUDA_MPS_LOG_DIRECTORY.
	PipeDir, LogDir string
	// GPUs are the UUIDs the daemon may use.
	GPUs []string
	// ActiveThreadPercentage and PinnedMemLimitMiB are one replica's
	// defaults; zero leaves the daemon's own default.
	ActiveThreadPercentage int
	PinnedMemLimitMiB      uint64
	// PinnedMemLimitsMiB, when set, is the limit per GPU (in the order of
	// GPUs); a zero entry falls back to PinnedMemLimitMiB.
	PinnedMemLimitsMiB []uint64
	Runner             Runner
	// Backoff is the first wait before a restart; it doubles up to a minute.
	Backoff time.Duration
	Logger  *slog.Logger
}

// Status is a daemon's state for others to read.
type Status struct {
	Running  bool
	Restarts int
	LastErr  string
}

// Daemon supervises one control daemon.
type Daemon struct {
	o   DaemonOptions
	log *slog.Logger

	mu     sync.Mutex
	status Status
}

// NewDaemon checks its options.
func NewDaemon(o DaemonOptions) (*Daemon, error) {
	if o.PipeDir == "" || o.LogDir == "" {
		return nil, fmt.Errorf("MPS daemon for %s: pipe and log directories are required", o.Resource)
	}
	if len(o.GPUs) == 0 {
		return nil, fmt.Errorf("MPS daemon for %s: no GPUs", o.Resource)
	}
	if o.Runner == nil {
		o.Runner = ExecRunner{}
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Daemon{o: o, log: o.Logger.With("resource", o.Resource)}, nil
}

// Status returns the daemon's state.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

func dirEnv(pipeDir, logDir string) []string {
	return []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipeDir, "CUDA_MPS_LOG_DIRECTORY=" + logDir}
}

func (d *Daemon) env() []string {
	return append(dirEnv(d.o.PipeDir, d.o.LogDir), "CUDA_VISIBLE_DEVICES="+strings.Join(d.o.GPUs, ","))
}

// QuitLeftover asks the control daemon left at pipeDir to quit, when the
// directory has the daemon's pipe. A daemon outlives an agent that was
// killed, and holds its pipe directory: a new daemon there fails to start,
// and a daemon of a claim that is gone would run on. It reports whether
// the pipe was there; the error is the quit's, as when the pipe is all a
// daemon that died left behind, and need not stop the caller. A nil runner
// runs the real nvidia-cuda-mps-control.
func QuitLeftover(ctx context.Context, r Runner, pipeDir, logDir string) (bool, error) {
	if _, err := os.Lstat(filepath.Join(pipeDir, ControlPipe)); err != nil {
		return false, nil //nolint:nilerr // no pipe (or no directory): no daemon to quit
	}
	if r == nil {
		r = ExecRunner{}
	}
	ctx, cancel := context.WithTimeout(ctx, quitTimeout)
	defer cancel()
	if err := r.Run(ctx, Command{Path: ControlBinary, Env: dirEnv(pipeDir, logDir)}, "quit"); err != nil {
		return true, fmt.Errorf("asking the MPS control daemon at %s to quit: %w", pipeDir, err)
	}
	return true, nil
}

func (d *Daemon) control(ctx context.Context, input string) error {
	return d.o.Runner.Run(ctx, Command{Path: ControlBinary, Env: d.env()}, input)
}

// Run starts the daemon and restarts it when it exits, until ctx ends;
// then it asks the daemon to quit.
func (d *Daemon) Run(ctx context.Context) error {
	for _, dir := range []string{d.o.PipeDir, d.o.LogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS daemon for %s: creating %s: %w", d.o.Resource, dir, err)
		}
	}
	// Only before the first start: later, the daemon that left the pipe
	// was this one's, and it has exited.
	switch left, err := QuitLeftover(ctx, d.o.Runner, d.o.PipeDir, d.o.LogDir); {
	case left && err != nil:
		d.log.Info("the pipe directory has a control pipe, but no MPS control daemon answered quit; starting one", "pipe", d.o.PipeDir, "err", err)
	case left:
		d.log.Info("asked the MPS control daemon an earlier run left at the pipe directory to quit", "pipe", d.o.PipeDir)
	}
	backoff := d.o.Backoff
	for {
		started := time.Now()
		err := d.runOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		d.mu.Lock()
		d.status.Running = false
		d.status.Restarts++
		if err != nil {
			d.status.LastErr = err.Error()
		}
		d.mu.Unlock()
		if time.Since(started) > time.Minute {
			backoff = d.o.Backoff
		}
		d.log.Error("MPS control daemon exited; restarting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

func (d *Daemon) runOnce(ctx context.Context) error {
	p, err := d.o.Runner.Start(ctx, Command{Path: ControlBinary, Args: []string{"-f"}, Env: d.env()})
	if err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- p.Wait() }()
	if err := d.configure(ctx); err != nil {
		_ = p.Kill()
		if werr := <-exited; werr != nil {
			d.log.Debug("MPS control daemon killed", "err", werr)
		}
		return fmt.Errorf("configuring the MPS control daemon: %w", err)
	}
	d.mu.Lock()
	d.status.Running, d.status.LastErr = true, ""
	d.mu.Unlock()
	d.log.Info("MPS control daemon running", "gpus", len(d.o.GPUs), "pipe", d.o.PipeDir)
	select {
	case err := <-exited:
		if err == nil {
			err = errors.New("exited with status 0")
		}
		return err
	case <-ctx.Done():
		quitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.control(quitCtx, "quit"); err != nil {
			d.log.Warn("asking the MPS control daemon to quit; killing it", "err", err)
			_ = p.Kill()
		}
		select {
		case err := <-exited:
			d.log.Debug("MPS control daemon quit", "err", err)
		case <-quitCtx.Done():
			_ = p.Kill()
			if err := <-exited; err != nil {
				d.log.Debug("MPS control daemon killed", "err", err)
			}
		}
		d.mu.Lock()
		d.status.Running = false
		d.mu.Unlock()
		return nil
	}
}

func (d *Daemon) configure(ctx context.Context) error {
	if d.o.ActiveThreadPercentage > 0 {
		if err := d.control(ctx, fmt.Sprintf("set_default_active_thread_percentage %d", d.o.ActiveThreadPercentage)); err != nil {
			return err
		}
	}
	for i := range d.o.GPUs {
		limit := d.o.PinnedMemLimitMiB
		if i < len(d.o.PinnedMemLimitsMiB) && d.o.PinnedMemLimitsMiB[i] > 0 {
			limit = d.o.PinnedMemLimitsMiB[i]
		}
		if limit == 0 {
			continue
		}
		if err := d.control(ctx, fmt.Sprintf("set_default_device_pinned_mem_limit %d %dM", i, limit)); err != nil {
			return err
		}
	}
	return nil
}

// PipeDir and LogDir place a resource's directories under the MPS root.
func PipeDir(root, resourceShortName string) string {
	return filepath.Join(root, resourceShortName, "pipe")
}

// LogDir is the daemon's log directory of a resource.
func LogDir(root, resourceShortName string) string {
	return filepath.Join(root, resourceShortName, "log")
}
