package dra

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

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/mps"
)

// recRunner records the MPS control daemons started and the commands sent
// to them; a daemon runs until it is sent quit or killed.
type recRunner struct {
	mu      sync.Mutex
	started []mps.Command
	inputs  map[string][]string // by pipe directory
	running map[string]*recProc
}

type recProc struct {
	done chan error
	once sync.Once
}

func (p *recProc) Wait() error { return <-p.done }
func (p *recProc) Kill() error { p.end(errors.New("killed")); return nil }
func (p *recProc) end(err error) {
	p.once.Do(func() { p.done <- err; close(p.done) })
}

func pipeOf(c mps.Command) string {
	for _, e := range c.Env {
		if v, ok := strings.CutPrefix(e, "CUDA_MPS_PIPE_DIRECTORY="); ok {
			return v
		}
	}
	return ""
}

func (r *recRunner) Start(_ context.Context, c mps.Command) (mps.Process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, c)
	p := &recProc{done: make(chan error, 1)}
	if r.running == nil {
		r.running = map[string]*recProc{}
	}
	r.running[pipeOf(c)] = p
	return p, nil
}

func (r *recRunner) Run(_ context.Context, c mps.Command, stdin string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	pipe := pipeOf(c)
	if r.inputs == nil {
		r.inputs = map[string][]string{}
	}
	r.inputs[pipe] = append(r.inputs[pipe], stdin)
	if stdin == "quit" {
		if p := r.running[pipe]; p != nil {
			p.end(nil)
			delete(r.running, pipe)
		}
	}
	return nil
}

func (r *recRunner) state(pipe string) (starts int, inputs []string, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.started {
		if pipeOf(c) == pipe {
			starts++
		}
	}
	_, running = r.running[pipe]
	return starts, slices.Clone(r.inputs[pipe]), running
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

func sharingDriver(t *testing.T, b *sim.Backend, dir string, l *ledger.Ledger, r mps.Runner, shared bool) *Driver {
	t.Helper()
	w, err := cdi.NewWriter(cdi.Options{Dir: dir + "/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(context.Background(), Options{Backend: b, NodeName: testNode, CDI: w, StateFile: dir + "/state/checkpoint.json",
		Ledger: l, MPSRoot: dir + "/mps", MPSRunner: r, SharedGPUs: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

const mpsConfig = `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25,"defaultPinnedDeviceMemoryLimit":"20Gi","defaultPerDevicePinnedMemoryLimit":{"3":"10Gi"}}}}`

func TestMPSClaimRunsItsDaemon(t *testing.T) {
	dir := t.TempDir()
	b := simBackend(t)
	r := &recRunner{}
	d := sharingDriver(t, b, dir, ledger.New(), r, false)
	c := claim("uid-mps", "gpu-2", "gpu-3").config(resourceapi.AllocationConfigSourceClaim, mpsConfig).obj()
	if _, err := prepareOne(t, d, c); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "mps", "claim-uid-mps", "pipe")
	logDir := filepath.Join(dir, "mps", "claim-uid-mps", "log")
	waitFor(t, "the claim's daemon configured", func() bool {
		st, ok := d.MPSDaemon("uid-mps")
		return ok && st.Running
	})
	t.Run("daemon limited to the claim's GPUs with its limits", func(t *testing.T) {
		starts, inputs, running := r.state(pipe)
		if starts != 1 || !running {
			t.Fatalf("starts=%d running=%v", starts, running)
		}
		want := []string{"set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 20480M", "set_default_device_pinned_mem_limit 1 10240M"}
		if !slices.Equal(inputs, want) {
			t.Errorf("control inputs %q, want %q", inputs, want)
		}
		r.mu.Lock()
		env := strings.Join(r.started[0].Env, " ")
		r.mu.Unlock()
		u2, u3 := d.inv.byName["gpu-2"].gpu.UUID, d.inv.byName["gpu-3"].gpu.UUID
		if !strings.Contains(env, "CUDA_VISIBLE_DEVICES="+u2+","+u3) || !strings.Contains(env, "CUDA_MPS_LOG_DIRECTORY="+logDir) {
			t.Errorf("daemon env %q", env)
		}
	})
	t.Run("CDI spec mounts the pipe and log directories", func(t *testing.T) {
		data, err := os.ReadFile(cdi.ClaimSpecPath(dir+"/cdi", "uid-mps"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + logDir, "hostPath: " + pipe, "hostPath: " + logDir, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"} {
			if !strings.Contains(string(data), want) {
				t.Errorf("spec lacks %q:\n%s", want, data)
			}
		}
	})
	t.Run("a second MPS claim on the same GPU is refused", func(t *testing.T) {
		// Not possible with exclusive GPUs (the ledger refuses first);
		// the MPS check names the claim holding the daemon.
		_, err := prepareOne(t, d, claim("uid-other", "gpu-3").config(resourceapi.AllocationConfigSourceClaim, mpsConfig).obj())
		if err == nil || !strings.Contains(err.Error(), "ns/claim-uid-mps") {
			t.Errorf("err = %v, want it to name the claim running the daemon", err)
		}
	})
	t.Run("restart brings the daemon back", func(t *testing.T) {
		d.Close()
		waitFor(t, "the daemon to quit", func() bool { _, _, running := r.state(pipe); return !running })
		d2 := sharingDriver(t, b, dir, ledger.New(), r, false)
		waitFor(t, "the daemon restarted", func() bool {
			st, ok := d2.MPSDaemon("uid-mps")
			return ok && st.Running
		})
		if starts, _, _ := r.state(pipe); starts != 2 {
			t.Errorf("%d starts, want 2", starts)
		}
		unprepareOne(t, d2, "uid-mps")
		if _, ok := d2.MPSDaemon("uid-mps"); ok {
			t.Error("daemon still supervised after unprepare")
		}
		_, inputs, running := r.state(pipe)
		if running || inputs[len(inputs)-1] != "quit" {
			t.Errorf("after unprepare: running=%v, last input %q", running, inputs[len(inputs)-1])
		}
	})
}

func TestMPSClaimWithoutRootRefused(t *testing.T) {
	dir := t.TempDir()
	w, err := cdi.NewWriter(cdi.Options{Dir: dir + "/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(context.Background(), Options{Backend: simBackend(t), NodeName: testNode, CDI: w, StateFile: dir + "/checkpoint.json"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = prepareOne(t, d, claim("u", "gpu-2").config(resourceapi.AllocationConfigSourceClaim, mpsConfig).obj())
	if err == nil || !strings.Contains(err.Error(), "MPS root") {
		t.Fatalf("err = %v, want the missing MPS root named", err)
	}
	if _, err := os.Stat(cdi.ClaimSpecPath(dir+"/cdi", "u")); !os.IsNotExist(err) {
		t.Error("a refused claim left a CDI spec")
	}
}

func tsConfig(interval string) string {
	return `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"` + interval + `"}}}`
}

func TestTimeSlicingClaimSetsTheSlice(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		interval string
		want     gpu.TimeSlice
	}{
		{"long", "Long", gpu.TimeSliceLong},
		{"short", "Short", gpu.TimeSliceShort},
		{"medium", "Medium", gpu.TimeSliceMedium},
		{"default", "Default", gpu.TimeSliceDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			b := simBackend(t)
			d := sharingDriver(t, b, dir, ledger.New(), &recRunner{}, false)
			if _, err := prepareOne(t, d, claim("uid-ts", "gpu-2").config(resourceapi.AllocationConfigSourceClass, tsConfig(tt.interval)).obj()); err != nil {
				t.Fatal(err)
			}
			if got, err := b.TimeSlice(ctx, 2); err != nil || got != tt.want {
				t.Fatalf("GPU 2's slice = %v, %v; want %v", got, err, tt.want)
			}
			if got, _ := b.TimeSlice(ctx, 3); got != gpu.TimeSliceDefault {
				t.Errorf("GPU 3's slice = %v, want it untouched", got)
			}
			// A reset drops the slice; a restart of the driver sets it again.
			if err := b.ResetGPU(ctx, 2); err != nil {
				t.Fatal(err)
			}
			d.Close()
			d2 := sharingDriver(t, b, dir, ledger.New(), &recRunner{}, false)
			if got, _ := b.TimeSlice(ctx, 2); got != tt.want {
				t.Errorf("after reset and restart: slice = %v, want %v", got, tt.want)
			}
			unprepareOne(t, d2, "uid-ts")
			if got, _ := b.TimeSlice(ctx, 2); got != gpu.TimeSliceDefault {
				t.Errorf("after unprepare: slice = %v, want Default", got)
			}
		})
	}
}

func TestTimeSlicingFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	b := simBackend(t)
	l := ledger.New()
	d := sharingDriver(t, b, dir, l, &recRunner{}, false)
	if err := b.FailCall(sim.OpSetTimeSlice, 2, nil); err != nil {
		t.Fatal(err)
	}
	_, err := prepareOne(t, d, claim("uid-ts", "gpu-2").config(resourceapi.AllocationConfigSourceClaim, tsConfig("Long")).obj())
	if !errors.Is(err, sim.ErrInjected) {
		t.Fatalf("err = %v, want the backend's failure", err)
	}
	if got := l.Claimed(); len(got) != 0 {
		t.Errorf("ledger holds %v after a failed prepare", got)
	}
	if got := d.Prepared(); len(got) != 0 {
		t.Errorf("prepared %v after a failed prepare", got)
	}
	if _, err := os.Stat(cdi.ClaimSpecPath(dir+"/cdi", "uid-ts")); !os.IsNotExist(err) {
		t.Error("a failed claim left a CDI spec")
	}
}

// TestRestartQuitsTheDaemonLeftForAClaim: the agent was killed with a
// claim configured for MPS on the node, and the claim's control daemon
// outlived it, holding the claim's pipe directory.
func TestRestartQuitsTheDaemonLeftForAClaim(t *testing.T) {
	ctx := context.Background()
	// restart starts a driver from a checkpoint holding the claim, in
	// state, on GPU 2; left says whether the claim's daemon runs from an
	// earlier run, its control pipe in the pipe directory.
	restart := func(t *testing.T, state string, left bool) (*Driver, *recRunner, string) {
		t.Helper()
		dir := t.TempDir()
		b := simBackend(t)
		devs, err := b.Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(dir, "mps", "claim-uid-mps")
		pipe := filepath.Join(base, "pipe")
		cp := &checkpoint{Version: checkpointVersion, Claims: map[string]*preparedClaim{"uid-mps": {
			Namespace: "ns", Name: "claim-uid-mps", State: state,
			Devices: []preparedDevice{{Requests: []string{"r0"}, Pool: testNode, Device: "gpu-2", UUID: devs[2].UUID}},
			Sharing: &preparedSharing{MPS: &preparedMPS{PipeDir: pipe, LogDir: filepath.Join(base, "log"),
				GPUs: []string{devs[2].UUID}, Devices: []int{0}, PinnedMemLimitsMiB: []uint64{0}}},
		}}}
		if err := os.MkdirAll(filepath.Join(dir, "state"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := cp.save(filepath.Join(dir, "state", "checkpoint.json")); err != nil {
			t.Fatal(err)
		}
		r := &recRunner{}
		if left {
			if err := os.MkdirAll(pipe, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pipe, mps.ControlPipe), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Start(ctx, mps.Command{Path: mps.ControlBinary, Args: []string{"-f"}, Env: []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe}}); err != nil {
				t.Fatal(err)
			}
		}
		return sharingDriver(t, b, dir, ledger.New(), r, false), r, pipe
	}

	t.Run("a claim caught preparing: rolled back, its daemon asked to quit", func(t *testing.T) {
		d, r, pipe := restart(t, statePreparing, true)
		if got := d.Prepared(); len(got) != 0 {
			t.Errorf("prepared %v after the rollback", got)
		}
		starts, inputs, running := r.state(pipe)
		if !slices.Equal(inputs, []string{"quit"}) || running {
			t.Errorf("the daemon left for the claim: sent %q, running %v; want quit, not running", inputs, running)
		}
		if starts != 1 {
			t.Errorf("%d daemons started at the pipe, want the one left alone", starts)
		}
		if _, ok := d.MPSDaemon("uid-mps"); ok {
			t.Error("a rolled back claim has a daemon")
		}
	})

	t.Run("a claim caught preparing before its daemon started: nothing to quit", func(t *testing.T) {
		_, r, pipe := restart(t, statePreparing, false)
		if starts, inputs, _ := r.state(pipe); starts != 0 || len(inputs) != 0 {
			t.Errorf("at the claim's pipe: %d starts, sent %q; want none", starts, inputs)
		}
	})

	t.Run("a prepared claim: the daemon left is asked to quit, a new one runs", func(t *testing.T) {
		d, r, pipe := restart(t, statePrepared, true)
		waitFor(t, "the claim's daemon running again", func() bool {
			st, ok := d.MPSDaemon("uid-mps")
			return ok && st.Running
		})
		starts, inputs, running := r.state(pipe)
		if len(inputs) == 0 || inputs[0] != "quit" || starts != 2 || !running {
			t.Errorf("at the claim's pipe: sent %q, %d starts, running %v; want quit first, then a second daemon running", inputs, starts, running)
		}
	})
}
