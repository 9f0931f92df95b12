package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// logTailLines is how many lines of a component's log an error quotes.
const logTailLines = 25

// spawner starts child processes from one goroutine locked to its OS thread.
//
// Linux delivers a child's parent-death signal (Pdeathsig) when the *thread*
// that forked it exits, not the process. The Go runtime may retire threads, so
// forking from arbitrary goroutines could kill a component at a random moment;
// forking from a thread that lives exactly as long as the control plane makes
// the signal fire when the test process dies, and only then.
type spawner struct {
	requests chan spawnRequest
	done     chan struct{}
}

type spawnRequest struct {
	cmd    *exec.Cmd
	result chan error
}

func newSpawner() *spawner {
	s := &spawner{requests: make(chan spawnRequest), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *spawner) run() {
	runtime.LockOSThread()
	// The thread is deliberately never unlocked: when run returns, the runtime
	// discards it, which is harmless because every child has exited by then.
	defer close(s.done)
	for req := range s.requests {
		req.result <- req.cmd.Start()
	}
}

func (s *spawner) start(cmd *exec.Cmd) error {
	result := make(chan error, 1)
	s.requests <- spawnRequest{cmd: cmd, result: result}
	return <-result
}

// close stops the spawner; call it only after every child has exited.
func (s *spawner) close() {
	close(s.requests)
	<-s.done
}

// process is one running component.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// startProcess runs binary with args, output appended to logPath, in a new
// process group that receives SIGKILL when the starting thread dies.
func startProcess(sp *spawner, name, binary string, args []string, dir, logPath string, env ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = os.Environ()
	if env != nil {
		cmd.Env = env
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	if err := sp.start(cmd); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, binary, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: logFile, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// hasExited reports whether the process has terminated.
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitError describes a process that exited when it should have kept
// running, quoting the end of its log.
func (p *process) exitError() error {
	status := "exited"
	if p.waitErr != nil {
		status = p.waitErr.Error()
	}
	return &ExitError{Component: p.name, Status: status, LogPath: p.logPath, LogTail: TailFile(p.logPath, logTailLines)}
}

// stop sends SIGTERM to the process group, waits up to grace (or until ctx
// ends) for the process to exit, then sends SIGKILL and waits again. It
// returns an error only when the process could not be made to exit.
func (p *process) stop(ctx context.Context, grace time.Duration) error {
	if p.hasExited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		// Children the component left behind go the hard way.
		return p.killGroup(pgid)
	case <-timer.C:
	case <-ctx.Done():
	}
	return p.killGroup(pgid)
}

// killGroup sends SIGKILL to the process group and waits until no member of
// it is alive (zombies awaiting their reaper do not count).
func (p *process) killGroup(pgid int) error {
	// Once the leader is gone and reaped, the group id may only be signalled
	// while some member remains; otherwise the id could belong to a stranger.
	if !p.hasExited() || groupAlive(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		if p.hasExited() && !groupAlive(pgid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stopping %s (process group %d): still running 10s after SIGKILL", p.name, pgid)
		}
		<-ticker.C
	}
}

// groupAlive reports whether any process of group pgid is still running,
// reading /proc.
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		state, group, ok := procState(filepath.Join("/proc", e.Name(), "stat"))
		if ok && group == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procState reads the state and process group from /proc/<pid>/stat.
func procState(path string) (state byte, pgid int, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	// The command name is parenthesised and may contain spaces; the fields
	// after it are: state ppid pgrp ...
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 3 {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(fields[2])
	if err != nil || len(fields[0]) == 0 {
		return 0, 0, false
	}
	return fields[0][0], pgid, true
}

// ExitError reports a component that exited while it should have been
// running. LogTail holds the last lines of its log.
type ExitError struct {
	Component string
	Status    string
	LogPath   string
	LogTail   string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s %s while the control plane was starting; last lines of %s:\n%s",
		e.Component, e.Status, e.LogPath, e.LogTail)
}

// addrInUse reports whether the component's log says it could not bind.
func (e *ExitError) addrInUse() bool {
	return strings.Contains(e.LogTail, "address already in use")
}

// TailFile returns the last n lines of the file at path (read from its last
// 64 KiB), each indented two spaces, or a note saying why it could not be
// read: for error messages that quote a process's log.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	defer f.Close()
	const maxRead = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxRead {
		if _, err := f.Seek(st.Size()-maxRead, io.SeekStart); err != nil {
			return fmt.Sprintf("(log unreadable: %v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return "  " + strings.ReplaceAll(Tail(string(data), n), "\n", "\n  ")
}

// Tail returns the last n lines of s, a log or a command's output.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// asExitError unwraps err to an *ExitError.
func asExitError(err error) (*ExitError, bool) {
	var ee *ExitError
	ok := errors.As(err, &ee)
	return ee, ok
}
