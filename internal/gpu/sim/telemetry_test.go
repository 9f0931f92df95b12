package sim

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func sample(t *testing.T, b *Backend, index int) gpu.Sample {
	t.Helper()
	var s gpu.Sample
	if err := b.Sample(context.Background(), index, &s); err != nil {
		t.Fatalf("Sample(%d): %v", index, err)
	}
	return s
}

func TestIdleSample(t *testing.T) {
	b, clk := newTestBackend(t, "dgxh100")
	spec := b.Profile().GPUs[0]
	clk.Advance(10 * time.Second)
	s := sample(t, b, 0)
	want := gpu.Sample{
		FBFreeMiB: spec.MemoryMiB - spec.ReservedMiB, FBReservedMiB: spec.ReservedMiB,
		GPUTempC: uint32(spec.IdleTempC), MemoryTempC: uint32(spec.IdleTempC) + 3,
		PowerMilliW: uint32(spec.IdleWatts * 1000), EnergyMilliJ: uint64(spec.IdleWatts * 10 * 1000),
		SMClockMHz: spec.IdleSMClockMHz, MemClockMHz: spec.MemClockMHz, Timestamp: t0.Add(10 * time.Second),
		// An idle H100 offers every reading but a vGPU license, all zero.
		Has: gpu.ReadEncoderUtil | gpu.ReadDecoderUtil | gpu.ReadNVLink | gpu.ReadProfiling,
	}
	if s != want {
		t.Errorf("idle sample\n got %+v\nwant %+v", s, want)
	}
	if spec.ReservedMiB == 0 || s.FBFreeMiB+s.FBReservedMiB != 81920 {
		t.Errorf("framebuffer does not add up to 80 GB: %+v", s)
	}
}

func TestLoadDrivesTelemetry(t *testing.T) {
	tests := []struct {
		name         string
		procs        []Proc
		wantUtil     uint32
		wantMemUtil  uint32
		wantUsed     uint64
		wantFullLoad bool
	}{
		{"one process", []Proc{{PID: 1, MemMiB: 4096, Util: 60, MemUtil: 20}}, 60, 20, 4096, false},
		{"two processes add up", []Proc{{PID: 1, MemMiB: 1000, Util: 30, MemUtil: 10}, {PID: 2, MemMiB: 2000, Util: 40, MemUtil: 30}}, 70, 40, 3000, false},
		{"saturated", []Proc{{PID: 1, MemMiB: 1, Util: 80, MemUtil: 90}, {PID: 2, MemMiB: 1, Util: 80, MemUtil: 90}}, 100, 100, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, clk := newTestBackend(t, "dgxh100")
			spec := b.Profile().GPUs[3]
			for _, p := range tt.procs {
				if err := b.RunProcess(3, p); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(time.Second)
			s := sample(t, b, 3)
			if s.GPUUtil != tt.wantUtil || s.MemCopyUtil != tt.wantMemUtil || s.FBUsedMiB != tt.wantUsed ||
				s.FBFreeMiB != spec.MemoryMiB-spec.ReservedMiB-tt.wantUsed || s.SMClockMHz != spec.MaxSMClockMHz {
				t.Errorf("sample = %+v", s)
			}
			power := float64(s.PowerMilliW) / 1000
			if power <= spec.IdleWatts || power > spec.TDPWatts || tt.wantFullLoad != (power == spec.TDPWatts) {
				t.Errorf("power %.1f W, idle %.0f, TDP %.0f", power, spec.IdleWatts, spec.TDPWatts)
			}
			if idle := sample(t, b, 4); idle.GPUUtil != 0 || idle.FBUsedMiB != 0 || idle.PowerMilliW != uint32(spec.IdleWatts*1000) {
				t.Errorf("GPU 4 is loaded too: %+v", idle)
			}
		})
	}
}

func TestEnergyAndTemperatureFollowPower(t *testing.T) {
	b, clk := newTestBackend(t, "dgxh100")
	spec := b.Profile().GPUs[0]
	if err := b.RunProcess(0, Proc{PID: 7, MemMiB: 1024, Util: 100, MemUtil: 100}); err != nil {
		t.Fatal(err)
	}
	before := sample(t, b, 0)
	if before.PowerMilliW != uint32(spec.TDPWatts*1000) {
		t.Fatalf("full load draws %d mW, want TDP", before.PowerMilliW)
	}
	clk.Advance(thermalTau)
	after := sample(t, b, 0)
	if got, want := after.EnergyMilliJ-before.EnergyMilliJ, uint64(spec.TDPWatts*thermalTau.Seconds()*1000); got != want {
		t.Errorf("energy over %v at TDP = %d mJ, want %d", thermalTau, got, want)
	}
	// After one time constant the temperature has covered 1-1/e of the way.
	want := spec.IdleTempC + (spec.MaxTempC-spec.IdleTempC)*(1-math.Exp(-1))
	if math.Abs(float64(after.GPUTempC)-want) > 0.5 {
		t.Errorf("temperature after %v = %d C, want %.1f", thermalTau, after.GPUTempC, want)
	}
	prev := after.GPUTempC
	for range 20 {
		clk.Advance(thermalTau)
		s := sample(t, b, 0)
		if s.GPUTempC < prev || float64(s.GPUTempC) > spec.MaxTempC {
			t.Fatalf("temperature went from %d to %d (max %.0f)", prev, s.GPUTempC, spec.MaxTempC)
		}
		prev = s.GPUTempC
	}
	if float64(prev) != spec.MaxTempC {
		t.Errorf("temperature settles at %d, want %.0f", prev, spec.MaxTempC)
	}
	if err := b.StopProcess(7); err != nil {
		t.Fatal(err)
	}
	clk.Advance(20 * thermalTau)
	if s := sample(t, b, 0); float64(s.GPUTempC) != spec.IdleTempC || s.SMClockMHz != spec.IdleSMClockMHz || s.FBUsedMiB != 0 {
		t.Errorf("after the process ends: %+v", s)
	}
}

// TestReadingsDoNotDependOnSampling runs the same load on two nodes, one
// sampled every second and one only at the end.
func TestReadingsDoNotDependOnSampling(t *testing.T) {
	often, c1 := newTestBackend(t, "dgxa100")
	rarely, c2 := newTestBackend(t, "dgxa100")
	for _, b := range []*Backend{often, rarely} {
		if err := b.RunProcess(5, Proc{PID: 1, MemMiB: 100, Util: 70, MemUtil: 30}); err != nil {
			t.Fatal(err)
		}
	}
	for range 120 {
		c1.Advance(time.Second)
		sample(t, often, 5)
	}
	c2.Advance(120 * time.Second)
	a, b := sample(t, often, 5), sample(t, rarely, 5)
	if d := int64(a.EnergyMilliJ) - int64(b.EnergyMilliJ); d < -1 || d > 1 || a.GPUTempC != b.GPUTempC {
		t.Errorf("sampled often: %d mJ %d C; rarely: %d mJ %d C", a.EnergyMilliJ, a.GPUTempC, b.EnergyMilliJ, b.GPUTempC)
	}
}

func TestProcesses(t *testing.T) {
	ctx := context.Background()
	b := migBackend(t)
	gi, err := b.CreateGPUInstance(ctx, 0, "2g.20gb", nil)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := b.CreateComputeInstance(ctx, 0, gi.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	mig := &MIGRef{GPUInstanceID: gi.ID, ComputeInstanceID: ci.ID}
	if err := b.RunProcess(0, Proc{PID: 100, MemMiB: 5000, Util: 90, MemUtil: 10, MIG: mig}); err != nil {
		t.Fatal(err)
	}
	if err := b.RunProcess(1, Proc{PID: 200, MemMiB: 3000, Util: 25, MemUtil: 5}); err != nil {
		t.Fatal(err)
	}
	got, err := b.Processes(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.Process{{PID: 100, UsedMemMiB: 5000, SMUtil: 90, MemUtil: 10, GPUInstanceID: gi.ID, ComputeInstanceID: ci.ID}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("GPU 0 processes = %+v, want %+v", got, want)
	}
	// A process in a 2-slice MIG device loads 2/7 of the GPU.
	if s := sample(t, b, 0); s.GPUUtil != uint32(math.Round(90*2.0/7)) {
		t.Errorf("GPU util with a MIG process = %d", s.GPUUtil)
	}
	buf := make([]gpu.Process, 0, 4)
	got, err = b.Processes(ctx, 1, buf)
	if err != nil || len(got) != 1 || got[0].PID != 200 || got[0].GPUInstanceID != -1 || got[0].ComputeInstanceID != -1 || &got[0] != &buf[:1][0] {
		t.Errorf("GPU 1 processes = %+v, %v (buffer reused: %v)", got, err, len(got) > 0 && &got[0] == &buf[:1][0])
	}
	if err := b.DestroyComputeInstance(ctx, 0, gi.ID, ci.ID); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("destroying a busy compute instance: %v, want ErrInUse", err)
	}
	if err := b.StopProcess(100); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Processes(ctx, 0, nil); len(got) != 0 {
		t.Errorf("after StopProcess: %+v", got)
	}
	if err := b.StopProcess(100); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("stopping twice: %v", err)
	}
	if err := b.SetProcessLoad(200, 100, 100); err != nil {
		t.Fatal(err)
	}
	if s := sample(t, b, 1); s.GPUUtil != 100 || s.MemCopyUtil != 100 {
		t.Errorf("after SetProcessLoad: %+v", s)
	}
}

func TestRunProcessErrors(t *testing.T) {
	ctx := context.Background()
	b := migBackend(t) // GPU 0 in MIG mode
	gi, err := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateComputeInstance(ctx, 0, gi.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.RunProcess(2, Proc{PID: 42, MemMiB: 1}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		index   int
		proc    Proc
		wantErr error
		want    string
	}{
		{"pid zero", 1, Proc{PID: 0}, nil, "PID must not be 0"},
		{"pid taken", 1, Proc{PID: 42}, nil, "already runs on gpu 2"},
		{"util over 100", 1, Proc{PID: 1, Util: 101}, nil, "percentage"},
		{"out of memory", 1, Proc{PID: 1, MemMiB: 81920}, gpu.ErrInsufficientResources, "out of memory"},
		{"MIG GPU needs a device", 0, Proc{PID: 1}, nil, "MIG mode"},
		{"MIG device on plain GPU", 1, Proc{PID: 1, MIG: &MIGRef{}}, gpu.ErrNotSupported, ""},
		{"missing MIG device", 0, Proc{PID: 1, MIG: &MIGRef{GPUInstanceID: 9}}, gpu.ErrNotFound, ""},
		{"MIG device out of memory", 0, Proc{PID: 1, MemMiB: 10241, MIG: &MIGRef{GPUInstanceID: gi.ID}}, gpu.ErrInsufficientResources, "10240 MiB free"},
		{"no such GPU", 8, Proc{PID: 1}, gpu.ErrNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := b.RunProcess(tt.index, tt.proc)
			if err == nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %v containing %q", err, tt.wantErr, tt.want)
			}
		})
	}
	if err := b.SetProcessLoad(42, 200, 0); err == nil {
		t.Error("SetProcessLoad accepted 200%")
	}
	if err := b.SetProcessLoad(43, 1, 1); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("SetProcessLoad of unknown pid: %v", err)
	}
}

func TestHealthCounters(t *testing.T) {
	b, _ := newTestBackend(t, "dgxh100")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.InjectECC(6, false))
	must(b.InjectECC(6, false))
	must(b.InjectECC(6, true))
	must(b.InjectPCIeReplay(6, 5))
	must(b.InjectXID(6, 48))
	s := sample(t, b, 6)
	wantECC := gpu.ECCCounts{VolatileSingleBit: 2, VolatileDoubleBit: 1, AggregateSingleBit: 2, AggregateDoubleBit: 1}
	wantRemap := gpu.RemappedRows{Uncorrectable: 1, Pending: true}
	if s.ECC != wantECC || s.RemappedRows != wantRemap || s.PCIeReplayCounter != 5 || s.LastXID != 48 || s.XIDCount != 1 {
		t.Errorf("after injections: ECC %+v remap %+v replays %d xid %d/%d", s.ECC, s.RemappedRows, s.PCIeReplayCounter, s.LastXID, s.XIDCount)
	}
	if o := sample(t, b, 5); o.ECC != (gpu.ECCCounts{}) || o.XIDCount != 0 || o.PCIeReplayCounter != 0 || o.RemappedRows.Pending {
		t.Errorf("GPU 5 changed: %+v", o)
	}
	must(b.Reset(6))
	s = sample(t, b, 6)
	wantECC.VolatileSingleBit, wantECC.VolatileDoubleBit = 0, 0
	wantRemap.Pending = false
	if s.ECC != wantECC || s.RemappedRows != wantRemap {
		t.Errorf("after reset: ECC %+v remap %+v", s.ECC, s.RemappedRows)
	}
}

func TestGDDRHasNoMemoryTemperature(t *testing.T) {
	p, err := Parse(strings.NewReader("gpus: [{model: T4, count: 2}]"), "t4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(p, Options{Clock: NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := sample(t, b, 1)
	// No memory temperature, no NVLink, no profiling (five readings).
	if s.MemoryTempC != 0 || s.MissingFieldsCount != 7 || s.PowerMilliW != 10000 {
		t.Errorf("T4 sample = %+v", s)
	}
}

func TestOptionalReadingsUnderLoad(t *testing.T) {
	b, clk := newTestBackend(t, "dgxh100")
	if err := b.RunProcess(3, Proc{PID: 1, MemMiB: 1024, Util: 80, MemUtil: 50}); err != nil {
		t.Fatal(err)
	}
	before := sample(t, b, 3)
	clk.Advance(10 * time.Second)
	s := sample(t, b, 3)
	want := gpu.ReadEncoderUtil | gpu.ReadDecoderUtil | gpu.ReadNVLink | gpu.ReadProfiling
	if s.Has != want || s.Unsupported != 0 || s.MissingFieldsCount != 0 {
		t.Errorf("H100 readings: has %b unsupported %b missing %d, want has %b", s.Has, s.Unsupported, s.MissingFieldsCount, want)
	}
	// Ratios follow the SM and memory load; PCIe Gen 5 carries 64 GB/s
	// each way, of which the load uses 5% out and 15% in at full load.
	wantProf := gpu.Profiling{GREngineActive: 0.8, TensorActive: 0.48, DRAMActive: 0.5,
		PCIeTxBytesPerSec: 0.05 * 64e9 * 0.8, PCIeRxBytesPerSec: 0.15 * 64e9 * 0.8}
	if !closeProf(s.Profiling, wantProf) {
		t.Errorf("profiling = %+v, want %+v", s.Profiling, wantProf)
	}
	// Eighteen NVLinks of 25 GB/s each way, 40% used at full load: 10 s
	// at 80% moves 18*2*25e9*0.4*0.8*10 bytes.
	wantKiB := 18 * 2 * 25e9 * 0.4 * 0.8 * 10 / 1024
	if got := float64(s.NVLinkKiB - before.NVLinkKiB); math.Abs(got-wantKiB) > 1 {
		t.Errorf("NVLink traffic over 10 s = %.0f KiB, want %.0f", got, wantKiB)
	}
	if s.EncoderUtil != 0 || s.DecoderUtil != 0 {
		t.Errorf("video engines busy without a video workload: enc %d dec %d", s.EncoderUtil, s.DecoderUtil)
	}
	// Idle, the counter stops and the ratios drop to zero.
	if err := b.StopProcess(1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	idle := sample(t, b, 3)
	if idle.NVLinkKiB != s.NVLinkKiB || idle.Profiling != (gpu.Profiling{}) {
		t.Errorf("idle: NVLink %d KiB (was %d), profiling %+v", idle.NVLinkKiB, s.NVLinkKiB, idle.Profiling)
	}
}

func closeProf(a, b gpu.Profiling) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return near(a.GREngineActive, b.GREngineActive) && near(a.TensorActive, b.TensorActive) && near(a.DRAMActive, b.DRAMActive) &&
		near(a.PCIeTxBytesPerSec, b.PCIeTxBytesPerSec) && near(a.PCIeRxBytesPerSec, b.PCIeRxBytesPerSec)
}

func TestOlderGPUsLackProfiling(t *testing.T) {
	tests := []struct {
		profile string
		nvlink  bool
	}{
		{"4xt4", false},
		{"8xv100", true},
		{"dgxa100", true},
		{"8xh100-pcie", false}, // Hopper, but no NVLink bridges
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			b, clk := newTestBackend(t, tt.profile)
			if err := b.RunProcess(0, Proc{PID: 1, MemMiB: 1024, Util: 90, MemUtil: 60}); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Second)
			s := sample(t, b, 0)
			hopper := b.Profile().GPUs[0].Architecture == gpu.ArchHopper
			if got := s.Has&gpu.ReadProfiling != 0; got != hopper {
				t.Errorf("profiling offered = %v on %s", got, b.Profile().GPUs[0].Architecture)
			}
			if got := s.Unsupported&gpu.ReadProfiling == gpu.ReadProfiling; got == hopper {
				t.Errorf("profiling unsupported = %v on %s", got, b.Profile().GPUs[0].Architecture)
			}
			if !hopper && s.Profiling != (gpu.Profiling{}) {
				t.Errorf("profiling readings without GPM: %+v", s.Profiling)
			}
			if got := s.Has&gpu.ReadNVLink != 0; got != tt.nvlink || (s.NVLinkKiB > 0) != tt.nvlink {
				t.Errorf("NVLink offered = %v with %d KiB, want %v", got, s.NVLinkKiB, tt.nvlink)
			}
			if s.Has&gpu.ReadVGPULicense != 0 {
				t.Error("a bare-metal GPU reports a vGPU license")
			}
		})
	}
}

func TestMIGProfilingPerGPUInstance(t *testing.T) {
	b := migBackend(t)
	ctx := context.Background()
	var ids []int
	for _, p := range []string{"3g.40gb", "1g.10gb"} {
		gi, err := b.CreateGPUInstance(ctx, 0, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := b.CreateComputeInstance(ctx, 0, gi.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			if err := b.RunProcess(0, Proc{PID: 1, MemMiB: 1024, Util: 50, MemUtil: 20, MIG: &MIGRef{GPUInstanceID: gi.ID, ComputeInstanceID: ci.ID}}); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, gi.ID)
	}
	s := sample(t, b, 0)
	if s.MIGProfilingCount != 2 {
		t.Fatalf("MIG profiling of %d GPU instances, want 2: %+v", s.MIGProfilingCount, s.MIGProfiling[:s.MIGProfilingCount])
	}
	busy, idle := s.MIGProfiling[0], s.MIGProfiling[1]
	if busy.GPUInstanceID != ids[0] || idle.GPUInstanceID != ids[1] || busy.Has != gpu.ReadProfiling {
		t.Errorf("MIG profiling = %+v", s.MIGProfiling[:2])
	}
	// The 3g instance is half busy; it holds 3 of 7 slices of the PCIe link.
	want := gpu.Profiling{GREngineActive: 0.5, TensorActive: 0.3, DRAMActive: 0.2,
		PCIeTxBytesPerSec: math.Round(0.05 * 64e9 * 3 / 7 * 0.5), PCIeRxBytesPerSec: math.Round(0.15 * 64e9 * 3 / 7 * 0.5)}
	if !closeProf(busy.Profiling, want) || idle.Profiling != (gpu.Profiling{}) {
		t.Errorf("busy GI %+v (want %+v), idle GI %+v", busy.Profiling, want, idle.Profiling)
	}
	// The whole GPU sees the 3g instance's load over its seven slices.
	if !closeProf(gpu.Profiling{GREngineActive: s.Profiling.GREngineActive}, gpu.Profiling{GREngineActive: math.Round(50*3.0/7) / 100}) {
		t.Errorf("whole-GPU GR engine active = %v", s.Profiling.GREngineActive)
	}
}

func TestSampleDoesNotAllocate(t *testing.T) {
	b, clk := newTestBackend(t, "dgxh100")
	for i := range 8 {
		if err := b.RunProcess(i, Proc{PID: uint32(i + 1), MemMiB: 1000, Util: uint32(10 * i), MemUtil: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.FailCall(OpTopology, 2, nil); err != nil { // a fault elsewhere must not cost anything
		t.Fatal(err)
	}
	ctx := context.Background()
	var s gpu.Sample
	allocs := testing.AllocsPerRun(10000, func() {
		clk.Advance(time.Millisecond)
		for i := range 8 {
			if err := b.Sample(ctx, i, &s); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Sample of 8 GPUs allocates %.1f times", allocs)
	}
}
