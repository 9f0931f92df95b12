package mps

import (
	"context"
	"errors"
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
	procs    []*fakeProc
	failRuns bool
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
	p := &fakeProc{done: make(chan error, 1)}
	r.procs = append(r.procs, p)
	return p, nil
}

func (r *fakeRunner) Run(_ context.Context, _ Command, stdin string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputs = append(r.inputs, stdin)
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
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
		cancel()
		if err := <-done; err != nil {
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, "failure reported", func() bool { return strings.Contains(d.Status().LastErr, "configuring") })
	if d.Status().Running {
		t.Error("running although configuration failed")
	}
	cancel()
	<-done
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, "running", func() bool { return d.Status().Running })
	cancel()
	<-done
	_, inputs, _ := r.snapshot()
	want := []string{"set_default_device_pinned_mem_limit 0 1000M", "set_default_device_pinned_mem_limit 1 2000M", "set_default_device_pinned_mem_limit 2 1000M", "quit"}
	if !slices.Equal(inputs, want) {
		t.Errorf("control inputs %q, want %q", inputs, want)
	}
}
