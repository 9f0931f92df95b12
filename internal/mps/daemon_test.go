package mps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRunner records commands; each started process runs until killed,
// quit through the control pipe, or crashed by the test.
type fakeRunner struct {
	mu       sync.Mutex
	started  []Command
	inputs   []string
	runs     []Command
	procs    []*fakeProc
	failRuns bool
	// order is every start ("start") and control input, in turn.
	order []string
}

type fakeProc struct {
	done chan error
	once sync.Once
}

func (p *fakeProc) Wait() error { return <-p.done }
func (p *fakeProc) Kill() error { p.end(errors.New("killed")); return nil }
func (p *fakeProc) end(err error) {
	p.once.Do(func() { p.done <- err; close(p.done) })
}

func (r *fakeRunner) Start(_ context.Context, c Command) (Process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, c)
	r.order = append(r.order, "start")
	p := &fakeProc{done: make(chan error, 1)}
	r.procs = append(r.procs, p)
	return p, nil
}

func (r *fakeRunner) Run(_ context.Context, c Command, stdin string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputs = append(r.inputs, stdin)
	r.runs = append(r.runs, c)
	r.order = append(r.order, stdin)
	if r.failRuns {
		return errors.New("no daemon")
	}
	if stdin == "quit" && len(r.procs) > 0 {
		r.procs[len(r.procs)-1].end(nil)
	}
	return nil
}

func (r *fakeRunner) snapshot() ([]Command, []string, []*fakeProc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started), slices.Clone(r.inputs), slices.Clone(r.procs)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// runDaemon runs d until the returned stop, which ends it and returns
// what Run returned.
func runDaemon(d *Daemon) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func TestDaemon(t *testing.T) {
	root := t.TempDir()
	r := &fakeRunner{}
	d, err := NewDaemon(DaemonOptions{
		Resource: "nvidia.com/gpu", PipeDir: PipeDir(root, "gpu"), LogDir: LogDir(root, "gpu"),
		GPUs: []string{"GPU-a", "GPU-b"}, ActiveThreadPercentage: 25, PinnedMemLimitMiB: 20000,
		Runner: r, Backoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runDaemon(d)
	eventually(t, "running", func() bool { return d.Status().Running })

	started, inputs, procs := r.snapshot()
	t.Run("started with the resource's environment", func(t *testing.T) {
		env := strings.Join(started[0].Env, " ")
		for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(root, "gpu", "pipe"), "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b"} {
			if !strings.Contains(env, want) {
				t.Errorf("env %q lacks %q", env, want)
			}
		}
		if started[0].Path != ControlBinary || !slices.Equal(started[0].Args, []string{"-f"}) {
			t.Errorf("command %+v", started[0])
		}
	})
	t.Run("limits set per replica", func(t *testing.T) {
		want := []string{"set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 20000M", "set_default_device_pinned_mem_limit 1 20000M"}
		if !slices.Equal(inputs, want) {
			t.Errorf("control inputs %q, want %q", inputs, want)
		}
	})
	t.Run("restarted after a crash", func(t *testing.T) {
		procs[0].end(errors.New("signal: segmentation fault"))
		eventually(t, "restart", func() bool { return d.Status().Restarts == 1 && d.Status().Running })
		if started, _, _ := r.snapshot(); len(started) != 2 {
			t.Errorf("%d starts, want 2", len(started))
		}
	})
	t.Run("quits on stop", func(t *testing.T) {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		_, inputs, _ := r.snapshot()
		if inputs[len(inputs)-1] != "quit" {
			t.Errorf("last control input %q, want quit", inputs[len(inputs)-1])
		}
		if d.Status().Running {
			t.Error("still running after stop")
		}
	})
}

func TestDaemonConfigureFailure(t *testing.T) {
	r := &fakeRunner{failRuns: true}
	root := t.TempDir()
	d, err := NewDaemon(DaemonOptions{Resource: "r", PipeDir: PipeDir(root, "r"), LogDir: LogDir(root, "r"), GPUs: []string{"GPU-a"}, ActiveThreadPercentage: 50, Runner: r, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := runDaemon(d)
	eventually(t, "failure reported", func() bool { return strings.Contains(d.Status().LastErr, "configuring") })
	if d.Status().Running {
		t.Error("running although configuration failed")
	}
	_ = stop()
}

func TestNewDaemonValidates(t *testing.T) {
	tests := []struct {
		name string
		o    DaemonOptions
	}{
		{"no dirs", DaemonOptions{GPUs: []string{"GPU-a"}}},
		{"no GPUs", DaemonOptions{PipeDir: "/p", LogDir: "/l"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewDaemon(tc.o); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestDaemonPerGPULimits(t *testing.T) {
	root := t.TempDir()
	r := &fakeRunner{}
	d, err := NewDaemon(DaemonOptions{
		Resource: "claim", PipeDir: PipeDir(root, "c"), LogDir: LogDir(root, "c"),
		GPUs: []string{"GPU-a", "GPU-b", "GPU-c"}, PinnedMemLimitMiB: 1000, PinnedMemLimitsMiB: []uint64{0, 2000},
		Runner: r, Backoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runDaemon(d)
	eventually(t, "running", func() bool { return d.Status().Running })
	_ = stop()
	_, inputs, _ := r.snapshot()
	want := []string{"set_default_device_pinned_mem_limit 0 1000M", "set_default_device_pinned_mem_limit 1 2000M", "set_default_device_pinned_mem_limit 2 1000M", "quit"}
	if !slices.Equal(inputs, want) {
		t.Errorf("control inputs %q, want %q", inputs, want)
	}
}

func TestDaemonQuitsTheOneLeftBehind(t *testing.T) {
	tests := []struct {
		name string
		// pipe leaves the control pipe in the pipe directory, as a
		// daemon that outlived a killed agent does.
		pipe     bool
		failRuns bool
		want     []string
	}{
		{"a daemon left at the pipe directory is asked to quit first", true, false, []string{"quit", "start"}},
		{"a pipe no daemon answers does not stop the start", true, true, []string{"quit", "start"}},
		{"no pipe, no quit", false, false, []string{"start"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			pipe, logDir := PipeDir(root, "c"), LogDir(root, "c")
			if tc.pipe {
				if err := os.MkdirAll(pipe, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(pipe, ControlPipe), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := &fakeRunner{failRuns: tc.failRuns}
			d, err := NewDaemon(DaemonOptions{Resource: "claim", PipeDir: pipe, LogDir: logDir, GPUs: []string{"GPU-a"}, Runner: r, Backoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			stop := runDaemon(d)
			eventually(t, "running", func() bool { return d.Status().Running })
			r.mu.Lock()
			order := slices.Clone(r.order)
			var quitEnv []string
			if len(r.runs) > 0 {
				quitEnv = r.runs[0].Env
			}
			procs := slices.Clone(r.procs)
			r.mu.Unlock()
			if !slices.Equal(order, tc.want) {
				t.Fatalf("started and sent %q, want %q", order, tc.want)
			}
			if tc.pipe {
				env := strings.Join(quitEnv, " ")
				for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + logDir} {
					if !strings.Contains(env, want) {
						t.Errorf("quit sent with env %q, lacking %q", env, want)
					}
				}
			}
			// The pipe a restart finds is this daemon's own: no quit.
			procs[0].end(errors.New("signal: segmentation fault"))
			eventually(t, "restart", func() bool { return d.Status().Restarts == 1 && d.Status().Running })
			r.mu.Lock()
			order = slices.Clone(r.order)
			r.mu.Unlock()
			if want := append(slices.Clone(tc.want), "start"); !slices.Equal(order, want) {
				t.Errorf("after a crash: started and sent %q, want %q", order, want)
			}
			_ = stop()
		})
	}
}

func TestQuitLeftover(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	pipe := PipeDir(root, "c")
	r := &fakeRunner{}
	if left, err := QuitLeftover(ctx, r, pipe, LogDir(root, "c")); left || err != nil {
		t.Errorf("without the pipe directory: left %v, err %v", left, err)
	}
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	if left, err := QuitLeftover(ctx, r, pipe, LogDir(root, "c")); left || err != nil {
		t.Errorf("without the pipe: left %v, err %v", left, err)
	}
	if _, inputs, _ := r.snapshot(); len(inputs) != 0 {
		t.Fatalf("sent %q with no pipe", inputs)
	}
	if err := os.WriteFile(filepath.Join(pipe, ControlPipe), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if left, err := QuitLeftover(ctx, r, pipe, LogDir(root, "c")); !left || err != nil {
		t.Errorf("with the pipe: left %v, err %v", left, err)
	}
	r.failRuns = true
	if left, err := QuitLeftover(ctx, r, pipe, LogDir(root, "c")); !left || err == nil || !strings.Contains(err.Error(), pipe) {
		t.Errorf("with no daemon answering: left %v, err %v; want the error naming the pipe directory", left, err)
	}
	if _, inputs, _ := r.snapshot(); !slices.Equal(inputs, []string{"quit", "quit"}) {
		t.Errorf("sent %q, want quit twice", inputs)
	}
}
