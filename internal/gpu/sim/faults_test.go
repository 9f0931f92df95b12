package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// faultNode is a DGX H100 where every GPU is in MIG mode with
//
//	GI 1 (3g.40gb) + CI 0, GI 2 (1g.10gb) + CI 0 running pid 100+i,
//	GI 3 (1g.10gb) without compute instance,
//
// so that every operation has something to act on.
func faultNode(t *testing.T) *Backend {
	t.Helper()
	ctx := context.Background()
	b, _ := newTestBackend(t, "dgxh100")
	for i := range 8 {
		steps := []error{b.SetMIGMode(ctx, i, true)}
		for _, p := range []string{"3g.40gb", "1g.10gb", "1g.10gb"} {
			_, err := b.CreateGPUInstance(ctx, i, p, nil)
			steps = append(steps, err)
		}
		_, err1 := b.CreateComputeInstance(ctx, i, 1, "")
		_, err2 := b.CreateComputeInstance(ctx, i, 2, "")
		steps = append(steps, err1, err2, b.RunProcess(i, Proc{PID: uint32(100 + i), MemMiB: 512, Util: 40, MIG: &MIGRef{GPUInstanceID: 2}}))
		if err := errors.Join(steps...); err != nil {
			t.Fatalf("setting up gpu %d: %v", i, err)
		}
	}
	return b
}

// opAnswer calls op about the GPU at index and renders that GPU's answer.
// Whole-node calls are narrowed to the GPU: its entry in Devices, its row
// of the topology matrix without the column of skip, its presence in a
// subscription's Unmonitored.
func opAnswer(b *Backend, op Op, index, skip int) (string, error) {
	ctx := context.Background()
	render := func(v any, err error) (string, error) {
		j, _ := json.Marshal(v)
		return string(j), err
	}
	switch op {
	case OpDevices:
		devs, err := b.Devices(ctx)
		for _, d := range devs {
			if d.Index == index {
				return render(d, nil)
			}
		}
		return "", err
	case OpTopology:
		top, err := b.Topology(ctx)
		if err != nil {
			return "", err
		}
		row := top.Matrix()[index]
		if skip >= 0 && skip != index {
			row = append(row[:skip:skip], row[skip+1:]...)
		}
		return strings.Join(row, " "), nil
	case OpSample:
		var s gpu.Sample
		err := b.Sample(ctx, index, &s)
		return render(s, err)
	case OpProcesses:
		return render(b.Processes(ctx, index, nil))
	case OpSubscribe:
		s, err := b.Subscribe(ctx)
		if err != nil {
			return "", err
		}
		defer s.Close()
		return "", s.Unmonitored()[GPUUUID(b.NodeName(), index)]
	case OpSetMIGMode:
		return "", b.SetMIGMode(ctx, index, true)
	case OpMIGProfiles:
		return render(b.MIGProfiles(ctx, index))
	case OpCreateGPUInstance:
		return render(b.CreateGPUInstance(ctx, index, "1g.10gb", nil))
	case OpCreateComputeInstance:
		return render(b.CreateComputeInstance(ctx, index, 3, ""))
	case OpDestroyComputeInstance:
		return "", b.DestroyComputeInstance(ctx, index, 1, 0)
	case OpDestroyGPUInstance:
		return "", b.DestroyGPUInstance(ctx, index, 3)
	case OpGPUInstances:
		return render(b.GPUInstances(ctx, index))
	case OpResetGPU:
		return "", b.ResetGPU(ctx, index)
	case OpSetTimeSlice:
		if err := b.SetTimeSlice(ctx, index, gpu.TimeSliceLong); err != nil {
			return "", err
		}
		return render(b.TimeSlice(ctx, index))
	}
	return "", fmt.Errorf("no caller for %s", op)
}

// TestFaultTouchesOnlyItsGPU injects, for every operation, a failure on GPU
// 3 and compares every GPU's answer with a node without the fault.
func TestFaultTouchesOnlyItsGPU(t *testing.T) {
	injected := errors.New("injected for the test")
	for _, op := range Ops() {
		// ResetGPU changes the GPU rather than reading it, and is refused
		// while processes run, as they do on every GPU here: TestResetGPU
		// covers its faults.
		if op == OpSystem || op == OpResetGPU {
			continue
		}
		t.Run(string(op), func(t *testing.T) {
			ref, faulty := faultNode(t), faultNode(t)
			if err := faulty.FailCall(op, 3, injected); err != nil {
				t.Fatal(err)
			}
			var want3 string
			for i := range 8 {
				want, wantErr := opAnswer(ref, op, i, 3)
				got, err := opAnswer(faulty, op, i, 3)
				if wantErr != nil {
					t.Fatalf("gpu %d: reference node fails: %v", i, wantErr)
				}
				if i == 3 && op != OpTopology {
					want3 = want
				}
				if i != 3 {
					if err != nil || got != want {
						t.Errorf("gpu %d changed by a fault on gpu 3:\n got %s, %v\nwant %s", i, got, err, want)
					}
					continue
				}
				if op == OpTopology {
					if err != nil || strings.Trim(got, "X? ") != "" {
						t.Errorf("gpu 3 links = %q, %v; want all unknown", got, err)
					}
					continue
				}
				if !errors.Is(err, injected) || !strings.Contains(err.Error(), "gpu 3") {
					t.Errorf("gpu 3: %q, %v; want the injected error naming gpu 3", got, err)
				}
			}
			// The call the fault refused now does what the reference did.
			faulty.ClearFaults()
			if op == OpTopology {
				want3, _ = opAnswer(ref, op, 3, -1)
			}
			if got, err := opAnswer(faulty, op, 3, -1); err != nil || got != want3 {
				t.Errorf("after ClearFaults: %s, %v; want %s", got, err, want3)
			}
		})
	}
}

func TestLostGPUTouchesOnlyItself(t *testing.T) {
	for _, op := range Ops() {
		// ResetGPU is what brings a lost GPU back (TestResetGPU).
		if op == OpSystem || op == OpResetGPU {
			continue
		}
		t.Run(string(op), func(t *testing.T) {
			ref, faulty := faultNode(t), faultNode(t)
			if err := faulty.LoseGPU(3); err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				want, wantErr := opAnswer(ref, op, i, 3)
				if wantErr != nil {
					t.Fatalf("gpu %d: reference node fails: %v", i, wantErr)
				}
				got, err := opAnswer(faulty, op, i, 3)
				switch {
				case i != 3:
					if err != nil || got != want {
						t.Errorf("gpu %d changed by losing gpu 3:\n got %s, %v\nwant %s", i, got, err, want)
					}
				case op == OpTopology:
					if err != nil || strings.Trim(got, "X? ") != "" {
						t.Errorf("lost gpu links = %q, %v; want all unknown", got, err)
					}
				case !errors.Is(err, gpu.ErrGPULost):
					t.Errorf("lost gpu: %q, %v; want ErrGPULost", got, err)
				}
			}
		})
	}
}

func TestRecoverLostGPU(t *testing.T) {
	ctx := context.Background()
	b := faultNode(t)
	before, _ := b.Devices(ctx)
	if err := b.LoseGPU(3); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"RunProcess": b.RunProcess(3, Proc{PID: 1}), "Reset": b.Reset(3), "InjectECC": b.InjectECC(3, true),
		"InjectPCIeReplay": b.InjectPCIeReplay(3, 1), "LoseGPU": b.LoseGPU(3), "StopProcess": b.StopProcess(103),
	} {
		if !errors.Is(err, gpu.ErrGPULost) && !errors.Is(err, gpu.ErrNotFound) {
			t.Errorf("%s on a lost GPU: %v", name, err)
		}
	}
	if err := b.Recover(3); err != nil {
		t.Fatal(err)
	}
	after, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after[3].UUID != before[3].UUID || !after[3].MIG.Current || len(after[3].MIGDevices) != 0 {
		t.Errorf("recovered gpu = %+v", after[3])
	}
	if procs, err := b.Processes(ctx, 3, nil); err != nil || len(procs) != 0 {
		t.Errorf("recovered gpu processes = %v, %v", procs, err)
	}
	if len(after[4].MIGDevices) != 2 {
		t.Errorf("gpu 4 lost its MIG devices: %+v", after[4].MIGDevices)
	}
	if err := b.RunProcess(3, Proc{PID: 103, MIG: &MIGRef{GPUInstanceID: 1}}); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("process on a MIG device that did not survive recovery: %v", err)
	}
}

func TestFailCallArguments(t *testing.T) {
	b, _ := newTestBackend(t, "dgxh100")
	tests := []struct {
		name  string
		op    Op
		index int
		want  string
	}{
		{"unknown op", "Smaple", 0, "unknown call"},
		{"system needs -1", OpSystem, 0, "index must be -1"},
		{"no such gpu", OpSample, 8, "not found"},
		{"negative gpu", OpSample, -1, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := b.FailCall(tt.op, tt.index, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FailCall = %v, want %q", err, tt.want)
			}
		})
	}
	if err := b.FailCall(OpSystem, -1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.System(context.Background()); !errors.Is(err, ErrInjected) {
		t.Errorf("System with a fault: %v", err)
	}
	b.ClearFaults()
	if _, err := b.System(context.Background()); err != nil {
		t.Errorf("System after ClearFaults: %v", err)
	}
}

func TestClosedBackend(t *testing.T) {
	b := faultNode(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, op := range Ops() {
		t.Run(string(op), func(t *testing.T) {
			var err error
			if op == OpSystem {
				_, err = b.System(ctx)
			} else {
				_, err = opAnswer(b, op, 0, -1)
			}
			if !errors.Is(err, gpu.ErrClosed) {
				t.Errorf("%s after Close: %v", op, err)
			}
		})
	}
	controls := map[string]error{
		"RunProcess": b.RunProcess(0, Proc{PID: 1}), "StopProcess": b.StopProcess(100), "Reset": b.Reset(0),
		"Recover": b.Recover(0), "LoseGPU": b.LoseGPU(0), "InjectXID": b.InjectXID(0, 1), "InjectECC": b.InjectECC(0, false),
		"FailCall": b.FailCall(OpSample, 0, nil), "FailEventWait": b.FailEventWait(1), "SetProcessLoad": b.SetProcessLoad(100, 1, 1),
	}
	for name, err := range controls {
		if !errors.Is(err, gpu.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

// TestConcurrentUse runs what an agent does at once (sampling, listing,
// subscribing) against what a device plugin and a MIG manager do
// (processes, MIG changes) and what a test injects; -race checks it.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	b, clk := newTestBackend(t, "dgxh100")
	if err := b.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, b)
	const rounds = 200
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	run := func(name string, f func(r int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if err := f(r); err != nil {
					errs <- fmt.Errorf("%s round %d: %w", name, r, err)
					return
				}
			}
		}()
	}
	run("sampler", func(int) error {
		var smp gpu.Sample
		for i := 1; i < 8; i++ {
			if err := b.Sample(ctx, i, &smp); err != nil && i != 2 {
				return err
			}
		}
		clk.Advance(1)
		return nil
	})
	run("inventory", func(int) error {
		if _, err := b.Topology(ctx); err != nil {
			return err
		}
		devs, _ := b.Devices(ctx)
		if len(devs) < 7 {
			return fmt.Errorf("%d devices", len(devs))
		}
		return nil
	})
	run("mig", func(int) error {
		gi, err := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
		if err != nil {
			return err
		}
		if _, err := b.CreateComputeInstance(ctx, 0, gi.ID, ""); err != nil {
			return err
		}
		if err := b.DestroyComputeInstance(ctx, 0, gi.ID, 0); err != nil {
			return err
		}
		return b.DestroyGPUInstance(ctx, 0, gi.ID)
	})
	run("processes", func(r int) error {
		if err := b.RunProcess(1, Proc{PID: uint32(r + 1), MemMiB: 10, Util: 50}); err != nil {
			return err
		}
		if _, err := b.Processes(ctx, 1, nil); err != nil {
			return err
		}
		return b.StopProcess(uint32(r + 1))
	})
	run("faults", func(int) error {
		if err := b.FailCall(OpSample, 2, nil); err != nil {
			return err
		}
		b.ClearFaults()
		return b.InjectXID(4, 31)
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for range rounds {
		if ev := recv(t, s); ev.Index != 4 || ev.XID != 31 {
			t.Fatalf("unexpected event %+v", ev)
		}
	}
}

func TestControlsRejectUnknownGPU(t *testing.T) {
	b, _ := newTestBackend(t, "dgxh100")
	tests := []struct {
		name string
		call func(index int) error
	}{
		{"RunProcess", func(i int) error { return b.RunProcess(i, Proc{PID: 1}) }},
		{"Reset", b.Reset},
		{"Recover", b.Recover},
		{"LoseGPU", b.LoseGPU},
		{"InjectXID", func(i int) error { return b.InjectXID(i, 31) }},
		{"InjectMIGXID", func(i int) error { return b.InjectMIGXID(i, 1, 0, 31) }},
		{"InjectECC", func(i int) error { return b.InjectECC(i, true) }},
		{"InjectPCIeReplay", func(i int) error { return b.InjectPCIeReplay(i, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, index := range []int{-1, 8} {
				if err := tt.call(index); !errors.Is(err, gpu.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("gpu %d", index)) {
					t.Errorf("index %d: %v, want ErrNotFound naming the GPU", index, err)
				}
			}
		})
	}
	devs, err := b.Devices(context.Background())
	if err != nil || len(devs) != 8 {
		t.Errorf("node changed by rejected controls: %d GPUs, %v", len(devs), err)
	}
}

func TestResetGPU(t *testing.T) {
	ctx := context.Background()
	t.Run("brings a lost GPU back", func(t *testing.T) {
		b, _ := newTestBackend(t, "dgxh100")
		if err := b.LoseGPU(3); err != nil {
			t.Fatal(err)
		}
		var s gpu.Sample
		if err := b.Sample(ctx, 3, &s); !errors.Is(err, gpu.ErrGPULost) {
			t.Fatalf("Sample of a lost GPU = %v", err)
		}
		if err := b.ResetGPU(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if err := b.Sample(ctx, 3, &s); err != nil {
			t.Fatalf("Sample after the reset = %v", err)
		}
	})
	t.Run("refuses while processes run", func(t *testing.T) {
		b, _ := newTestBackend(t, "dgxh100")
		if err := b.RunProcess(2, Proc{PID: 42, MemMiB: 100}); err != nil {
			t.Fatal(err)
		}
		if err := b.ResetGPU(ctx, 2); !errors.Is(err, gpu.ErrInUse) {
			t.Fatalf("ResetGPU with a process = %v, want ErrInUse", err)
		}
	})
	t.Run("an injected failure leaves the GPU lost", func(t *testing.T) {
		b, _ := newTestBackend(t, "dgxh100")
		if err := b.LoseGPU(3); err != nil {
			t.Fatal(err)
		}
		if err := b.FailCall(OpResetGPU, 3, nil); err != nil {
			t.Fatal(err)
		}
		err := b.ResetGPU(ctx, 3)
		if !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "resetting GPU") {
			t.Fatalf("ResetGPU with a fault = %v", err)
		}
		var s gpu.Sample
		if err := b.Sample(ctx, 3, &s); !errors.Is(err, gpu.ErrGPULost) {
			t.Fatalf("GPU answers after a failed reset: %v", err)
		}
		if err := b.ResetGPU(ctx, 4); err != nil {
			t.Fatalf("the fault reached GPU 4: %v", err)
		}
		b.ClearFaults()
		if err := b.ResetGPU(ctx, 3); err != nil {
			t.Fatalf("ResetGPU after ClearFaults = %v", err)
		}
	})
	t.Run("unknown GPU", func(t *testing.T) {
		b, _ := newTestBackend(t, "dgxh100")
		if err := b.ResetGPU(ctx, 8); !errors.Is(err, gpu.ErrNotFound) {
			t.Fatalf("ResetGPU(8) = %v", err)
		}
	})
}

func TestFailCreate(t *testing.T) {
	ctx := context.Background()
	refused := errors.New("the driver refuses")
	create := func(b *Backend, index int, profile string) error {
		gi, err := b.CreateGPUInstance(ctx, index, profile, nil)
		if err != nil {
			return err
		}
		_, err = b.CreateComputeInstance(ctx, index, gi.ID, "")
		return err
	}
	for _, tc := range []struct {
		name    string
		op      Op
		profile string
		times   int
		// steps are profiles created in order on GPU 2, and whether each
		// fails.
		steps []string
		fails []bool
	}{
		{"one profile, every time", OpCreateGPUInstance, "3g.40gb", 0,
			[]string{"3g.40gb", "1g.10gb", "3g.40gb"}, []bool{true, false, true}},
		{"the next call, any profile", OpCreateGPUInstance, "", 1,
			[]string{"1g.10gb", "1g.10gb"}, []bool{true, false}},
		{"the next two compute instances of a profile", OpCreateComputeInstance, "1g.10gb", 2,
			[]string{"3g.40gb", "1g.10gb", "1g.10gb"}, []bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newTestBackend(t, "dgxh100")
			if err := b.SetMIGMode(ctx, 2, true); err != nil {
				t.Fatal(err)
			}
			if err := b.FailCreate(tc.op, 2, tc.profile, tc.times, refused); err != nil {
				t.Fatal(err)
			}
			for i, p := range tc.steps {
				err := create(b, 2, p)
				if got := errors.Is(err, refused); got != tc.fails[i] {
					t.Errorf("step %d (%s): %v, want failing %v", i, p, err, tc.fails[i])
				}
			}
			// Other GPUs and other calls are untouched.
			if err := b.SetMIGMode(ctx, 3, true); err != nil {
				t.Fatal(err)
			}
			if err := create(b, 3, "3g.40gb"); err != nil {
				t.Errorf("GPU 3: %v", err)
			}
			if _, err := b.GPUInstances(ctx, 2); err != nil {
				t.Errorf("GPUInstances on GPU 2: %v", err)
			}
			b.ClearFaults()
			if err := create(b, 2, "1g.10gb"); err != nil {
				t.Errorf("after ClearFaults: %v", err)
			}
		})
	}
	t.Run("bad arguments", func(t *testing.T) {
		b, _ := newTestBackend(t, "dgxh100")
		for _, tc := range []struct {
			op      Op
			index   int
			profile string
			times   int
			want    string
		}{
			{OpSetMIGMode, 0, "", 1, "want CreateGPUInstance or CreateComputeInstance"},
			{OpCreateGPUInstance, 9, "", 1, "gpu 9"},
			{OpCreateGPUInstance, 0, "2g.7gb", 0, `profile "2g.7gb"`},
			{OpCreateGPUInstance, 0, "", -1, "times: want 0"},
		} {
			if err := b.FailCreate(tc.op, tc.index, tc.profile, tc.times, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FailCreate(%s, %d, %q, %d) = %v, want %q", tc.op, tc.index, tc.profile, tc.times, err, tc.want)
			}
		}
	})
}
