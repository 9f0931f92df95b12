package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func newDownCommand(resolve func() (stateDir, error)) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster and remove its state",
		Long: `down stops the dev cluster's supervisor, which stops the agents, the
simulated nodes and the control plane; it waits until every process the
cluster started is gone, then removes the state directory. With no cluster
running it says so and succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := resolve()
			if err != nil {
				return err
			}
			return down(cmd.Context(), dir, cmd.OutOrStdout(), timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for a clean stop before killing what is left")
	return cmd
}

// down stops the cluster recorded in dir and removes dir.
func down(ctx context.Context, dir stateDir, out io.Writer, timeout time.Duration) error {
	pid, err := dir.readPid()
	if err != nil {
		return err
	}
	if pid == 0 && !exists(string(dir)) {
		fmt.Fprintf(out, "no dev cluster is running (no state in %s)\n", dir)
		return nil
	}
	if !supervisorAlive(pid) {
		return cleanStale(dir, out)
	}
	st, _ := dir.readState()
	// Signal first, then talk: whatever happens to this process's output,
	// the supervisor has been told to stop.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling the supervisor (pid %d): %w", pid, err)
	}
	fmt.Fprintf(out, "stopping the dev cluster (supervisor pid %d)\n", pid)
	if !waitGone(ctx, []int{pid}, timeout) {
		fmt.Fprintf(out, "the supervisor did not stop within %v; killing it\n", timeout)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone(ctx, []int{pid}, 10*time.Second)
	}
	left := killRecorded(ctx, st)
	if len(left) > 0 {
		return fmt.Errorf("processes still running after the stop: %v; state kept in %s", left, dir)
	}
	if err := os.RemoveAll(string(dir)); err != nil {
		return fmt.Errorf("removing the state directory: %w", err)
	}
	n := 0
	if st != nil {
		n = len(st.Pids)
	}
	fmt.Fprintf(out, "stopped the dev cluster: the supervisor and %d processes are gone, %s removed\n", n, dir)
	return nil
}

// cleanStale removes the state of a cluster whose supervisor is gone,
// killing any recorded process that survived it.
func cleanStale(dir stateDir, out io.Writer) error {
	st, _ := dir.readState()
	left := killRecorded(context.Background(), st)
	if len(left) > 0 {
		return fmt.Errorf("a crashed dev cluster left processes that would not die: %v; state kept in %s", left, dir)
	}
	if err := os.RemoveAll(string(dir)); err != nil {
		return fmt.Errorf("removing the state of a crashed dev cluster: %w", err)
	}
	fmt.Fprintf(out, "no dev cluster is running; removed the stale state of an earlier one in %s\n", dir)
	return nil
}

// killRecorded SIGKILLs the process group of every recorded process still
// alive and returns the pids that outlived 10 seconds.
func killRecorded(ctx context.Context, st *State) []int {
	if st == nil {
		return nil
	}
	var alive []int
	for _, pid := range st.Pids {
		if processAlive(pid) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			alive = append(alive, pid)
		}
	}
	if len(alive) == 0 || waitGone(ctx, alive, 10*time.Second) {
		return nil
	}
	var left []int
	for _, pid := range alive {
		if processAlive(pid) {
			left = append(left, pid)
		}
	}
	sort.Ints(left)
	return left
}

// waitGone polls until none of pids is alive, for up to timeout.
func waitGone(ctx context.Context, pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		anyAlive := false
		for _, pid := range pids {
			anyAlive = anyAlive || processAlive(pid)
		}
		if !anyAlive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
	}
}
