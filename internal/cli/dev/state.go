package dev

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StateDirEnv overrides the default state directory.
const StateDirEnv = "GPUPLANE_DEV_DIR"

// Files in the state directory.
const (
	pidFile        = "supervisor.pid"
	specFile       = "spec.json"
	stateFile      = "state.json"
	progressFile   = "progress.log"
	kubeconfigFile = "kubeconfig"
	supervisorLog  = "supervisor.log"
)

// Phases of the supervisor, in state.json.
const (
	PhaseStarting = "starting"
	PhaseReady    = "ready"
	PhaseFailed   = "failed"
	PhaseStopping = "stopping"
)

// State is what the supervisor reports about the running cluster.
type State struct {
	Phase string `json:"phase"`
	// Error says why start-up failed (PhaseFailed).
	Error      string `json:"error,omitempty"`
	Pid        int    `json:"pid"`
	APIServer  string `json:"apiServer,omitempty"`
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Pids are every process the supervisor started, by name: control-plane
	// components and agents. Each is also its process group's id.
	Pids map[string]int `json:"pids,omitempty"`
	// Metrics are the agents' /metrics URLs by node.
	Metrics map[string]string `json:"metrics,omitempty"`
	// Faults are the loopback addresses of the simulated agents' fault
	// controls by node (gpuplane dev fault).
	Faults map[string]string `json:"faults,omitempty"`
	// Logs are log files by component.
	Logs map[string]string `json:"logs,omitempty"`
}

// defaultStateDir is $GPUPLANE_DEV_DIR, else $XDG_RUNTIME_DIR/gpuplane-dev,
// else ~/.gpuplane/dev.
func defaultStateDir() string {
	if d := os.Getenv(StateDirEnv); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gpuplane-dev")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".gpuplane", "dev")
	}
	return filepath.Join(os.TempDir(), "gpuplane-dev")
}

// stateDir is a dev cluster's state directory.
type stateDir string

func (d stateDir) path(name string) string { return filepath.Join(string(d), name) }

// readPid returns the supervisor pid recorded in the directory, 0 when there
// is no pid file.
func (d stateDir) readPid() (int, error) {
	b, err := os.ReadFile(d.path(pidFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the supervisor's pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s holds %q, not a pid; remove %s", d.path(pidFile), b, d)
	}
	return pid, nil
}

func (d stateDir) writePid(pid int) error {
	return writeFileAtomic(d.path(pidFile), []byte(strconv.Itoa(pid)+"\n"))
}

func (d stateDir) readState() (*State, error) {
	b, err := os.ReadFile(d.path(stateFile))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.path(stateFile), err)
	}
	return &s, nil
}

func (d stateDir) writeState(s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(d.path(stateFile), b)
}

func (d stateDir) readSpec() (*Spec, error) {
	b, err := os.ReadFile(d.path(specFile))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster spec: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.path(specFile), err)
	}
	return &s, nil
}

func (d stateDir) writeSpec(s *Spec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(d.path(specFile), b)
}

// writeFileAtomic replaces path's content in one step, so a reader never
// sees half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// supervisorAlive reports whether pid is a live `dev serve` process: a pid
// reused by an unrelated process after a crash does not count.
func supervisorAlive(pid int) bool {
	if !processAlive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	for i := 0; i+1 < len(args); i++ {
		if string(args[i]) == "dev" && string(args[i+1]) == "serve" {
			return true
		}
	}
	return false
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}
