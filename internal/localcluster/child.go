package localcluster

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Child is a process started the way the launcher starts components: in its
// own process group, output appended to a log file, killed by SIGKILL when
// the process that started it dies. Other packages use it for their own
// helpers (a node simulator's agent), so that nothing they start can outlive
// them.
type Child struct {
	sp        *spawner
	p         *process
	closeOnce sync.Once
}

// StartChild starts binary with args, its output appended to logPath.
func StartChild(name, binary string, args []string, logPath string) (*Child, error) {
	sp := newSpawner()
	p, err := startProcess(sp, name, binary, args, "", logPath)
	if err != nil {
		sp.close()
		return nil, err
	}
	return &Child{sp: sp, p: p}, nil
}

// StartChildEnv is StartChild with env as the child's whole environment
// instead of this process's.
func StartChildEnv(name, binary string, args, env []string, logPath string) (*Child, error) {
	if env == nil {
		env = []string{}
	}
	sp := newSpawner()
	p, err := startProcess(sp, name, binary, args, "", logPath, env...)
	if err != nil {
		sp.close()
		return nil, err
	}
	return &Child{sp: sp, p: p}, nil
}

// Pid returns the child's process id, which is also its process group id.
func (c *Child) Pid() int { return c.p.cmd.Process.Pid }

// Exited is closed when the child has exited.
func (c *Child) Exited() <-chan struct{} { return c.p.exited }

// ExitError describes the child's exit, quoting the end of its log; call it
// after Exited is closed.
func (c *Child) ExitError() error { return c.p.exitError() }

// Stop sends SIGTERM to the child's process group, SIGKILL after grace, and
// returns once no member of the group is alive.
func (c *Child) Stop(ctx context.Context, grace time.Duration) error {
	err := c.p.stop(ctx, grace)
	if err != nil {
		return fmt.Errorf("stopping %s: %w", c.p.name, err)
	}
	c.closeOnce.Do(c.sp.close)
	return nil
}

// Pids returns the process id of each component that has not exited, by
// component name (each is also the id of the component's process group).
func (cp *ControlPlane) Pids() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make(map[string]int, len(cp.processes))
	for _, p := range cp.processes {
		if !p.hasExited() {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}
