package localcluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeScript writes an executable shell script and returns its path.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProcessStop(t *testing.T) {
	tests := []struct {
		name   string
		script string
		grace  time.Duration
	}{
		{name: "exits on SIGTERM", script: "exec sleep 600", grace: 10 * time.Second},
		// The shell ignores TERM and so does its child: only SIGKILL ends it.
		{name: "ignores SIGTERM", script: "trap '' TERM; sleep 600 & wait", grace: 200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sp := newSpawner()
			defer sp.close()
			bin := writeScript(t, dir, "component", tc.script)
			p, err := startProcess(sp, "component", bin, nil, dir, filepath.Join(dir, "component.log"))
			if err != nil {
				t.Fatal(err)
			}
			pgid := p.cmd.Process.Pid
			if p.hasExited() || !groupAlive(pgid) {
				t.Fatalf("process is not running after start: %v", p.exitError())
			}
			if err := p.stop(context.Background(), tc.grace); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if !p.hasExited() {
				t.Fatal("stop returned while the process runs")
			}
			// Nothing of the group may survive, children included.
			if groupAlive(pgid) {
				t.Fatalf("process group %d still has running members after stop", pgid)
			}
		})
	}
}

func TestProcessExitErrorQuotesLog(t *testing.T) {
	dir := t.TempDir()
	sp := newSpawner()
	defer sp.close()
	bin := writeScript(t, dir, "component", `for i in $(seq 1 100); do echo "line $i"; done; echo "fatal: cannot open data dir" >&2; exit 3`)
	p, err := startProcess(sp, "etcd", bin, nil, dir, filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.exited
	err = p.exitError()
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exitError returned %T, want *ExitError", err)
	}
	msg := err.Error()
	for _, want := range []string{"etcd", "exit status 3", "fatal: cannot open data dir", "line 100"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "line 50\n") {
		t.Errorf("error quotes more than the tail of the log: %q", msg)
	}
}

func TestLaunchRetriesOnPortClash(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		fixedPort int
		wantErr   error
		wantTries int
	}{
		{
			name:      "gives up after the allowed attempts",
			script:    `echo "listen tcp 127.0.0.1:$1: bind: address already in use"; exit 1`,
			wantErr:   ErrPortInUse,
			wantTries: portAttempts,
		},
		{
			name:      "other failures are not retried",
			script:    `echo "flag provided but not defined"; exit 2`,
			wantTries: 1,
		},
		{
			name:      "an explicit port is not replaced",
			script:    `echo "listen tcp 127.0.0.1:$1: bind: address already in use"; exit 1`,
			fixedPort: 1, // never bound: the script only echoes it
			wantErr:   ErrPortInUse,
			wantTries: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cp := &ControlPlane{dir: dir, log: slog.New(slog.DiscardHandler), spawner: newSpawner()}
			defer cp.spawner.close()
			bin := writeScript(t, dir, "component", tc.script)
			tries := 0
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, err := cp.launch(ctx, launchSpec{
				name:      "component",
				binary:    bin,
				fixedPort: tc.fixedPort,
				args: func(port int) ([]string, error) {
					tries++
					return []string{strconv.Itoa(port)}, nil
				},
				ready: func(context.Context, int) bool { return false },
			})
			if err == nil {
				t.Fatal("launch succeeded with a component that always exits")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v is not %v", err, tc.wantErr)
			}
			if _, ok := asExitError(err); !ok {
				t.Errorf("error %v does not carry the component's exit", err)
			}
			if tries != tc.wantTries {
				t.Errorf("component started %d times, want %d", tries, tc.wantTries)
			}
		})
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	// Longer than the 64 KiB TailFile reads: the seek to the end is taken.
	data := strings.Repeat("early line\n", 8000) + "a\nb\nc\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := TailFile(path, 2), "  b\n  c"; got != want {
		t.Errorf("TailFile = %q, want %q", got, want)
	}
	if got := TailFile(filepath.Join(t.TempDir(), "none"), 2); !strings.HasPrefix(got, "(log unreadable: ") {
		t.Errorf("TailFile of a missing file = %q, want a note saying it is unreadable", got)
	}
	if got, want := Tail("one\ntwo\n", 5), "one\ntwo"; got != want {
		t.Errorf("Tail = %q, want %q", got, want)
	}
}
