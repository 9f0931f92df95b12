package nvml

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// TestMain lets the driverless test run Open in a child process: a call
// into NVML after a failed Init would kill the process, so the parent
// checks that the child survives and exits normally.
func TestMain(m *testing.M) {
	if os.Getenv("GPUPLANE_NVML_CHILD") == "1" {
		_, err := Open(Options{})
		fmt.Printf("no-driver=%v\n%v\n", errors.Is(err, gpu.ErrNoDriver), err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestOpenWithoutDriverFailsCleanly(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GPUPLANE_NVML_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process died (%v); output:\n%s", err, out)
	}
	for _, want := range []string{"no-driver=true", "libnvidia-ml.so.1", "NVIDIA driver installed", "--simulate", "failOnInitError"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestInitErrorHints(t *testing.T) {
	tests := []struct {
		name     string
		ret      gonvml.Return
		want     string
		noDriver bool
	}{
		{"library missing", gonvml.ERROR_LIBRARY_NOT_FOUND, "NVIDIA container runtime", true},
		{"module not loaded", gonvml.ERROR_DRIVER_NOT_LOADED, "kernel module is not loaded", true},
		{"permission", gonvml.ERROR_NO_PERMISSION, "privileged", false},
		{"version mismatch", gonvml.ERROR_LIB_RM_VERSION_MISMATCH, "Reboot", false},
		{"other", gonvml.ERROR_UNKNOWN, "nvidia-smi", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := dgxh100.New()
			lib.InitFunc = func() gonvml.Return { return tt.ret }
			calls := 0
			lib.DeviceGetCountFunc = func() (int, gonvml.Return) { calls++; return 0, gonvml.SUCCESS }
			_, err := Open(Options{Library: lib})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open error = %v, want it to mention %q", err, tt.want)
			}
			if errors.Is(err, gpu.ErrNoDriver) != tt.noDriver {
				t.Errorf("errors.Is(ErrNoDriver) = %v, want %v", !tt.noDriver, tt.noDriver)
			}
			if calls != 0 {
				t.Errorf("NVML was called %d times after a failed Init", calls)
			}
		})
	}
}

// fakeDGX decorates go-nvml's mock DGX H100 with what a real one answers
// and the mock leaves unset: PCI bus IDs, NUMA nodes, NVSwitch links,
// common PCIe ancestors and telemetry.
func fakeDGX(t *testing.T) *server.Server {
	t.Helper()
	s := dgxh100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.UUID = fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i)
		bus := fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10)
		dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
			var p gonvml.PciInfo
			for j, c := range bus {
				p.BusId[j] = int8(c)
			}
			return p, gonvml.SUCCESS
		}
		dev.GetGpuInstanceByIdFunc = func(id int) (gonvml.GpuInstance, gonvml.Return) {
			dev.RLock()
			defer dev.RUnlock()
			for gi := range dev.GpuInstances {
				if int(gi.Info.Id) == id {
					gi.GetComputeInstanceByIdFunc = func(ciID int) (gonvml.ComputeInstance, gonvml.Return) {
						gi.RLock()
						defer gi.RUnlock()
						for ci := range gi.ComputeInstances {
							if int(ci.Info.Id) == ciID {
								return ci, gonvml.SUCCESS
							}
						}
						return nil, gonvml.ERROR_NOT_FOUND
					}
					return gi, gonvml.SUCCESS
				}
			}
			return nil, gonvml.ERROR_NOT_FOUND
		}
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			if i == 7 { // a driver without the v2 call
				return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
			}
			return gonvml.Memory_v2{Total: 80 << 30, Reserved: 512 << 20, Free: 80<<30 - 512<<20}, gonvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, gonvml.Return) { return i / 4, gonvml.SUCCESS }
		dev.GetNvLinkStateFunc = func(link int) (gonvml.EnableState, gonvml.Return) {
			if link >= 18 {
				return 0, gonvml.ERROR_INVALID_ARGUMENT
			}
			return gonvml.FEATURE_ENABLED, gonvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (gonvml.IntNvLinkDeviceType, gonvml.Return) {
			return gonvml.NVLINK_DEVICE_TYPE_SWITCH, gonvml.SUCCESS
		}
		dev.GetTopologyCommonAncestorFunc = func(other gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
			if other.(*server.Device).Index/4 == i/4 {
				return gonvml.TOPOLOGY_NODE, gonvml.SUCCESS
			}
			return gonvml.TOPOLOGY_SYSTEM, gonvml.SUCCESS
		}
	}
	return s
}

func TestInventoryOnMockDGX(t *testing.T) {
	ctx := context.Background()
	b, err := Open(Options{Library: fakeDGX(t), Hostname: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sys, err := b.System(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sys.DriverVersion != "550.54.15" || sys.CUDADriverVersion.String() != "12.4" || sys.Hostname != "node-a" {
		t.Errorf("System = %+v", sys)
	}
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 8 {
		t.Fatalf("got %d devices, want 8", len(devs))
	}
	if devs[5].ReservedMiB != 512 || devs[7].ReservedMiB != 0 || devs[7].MemoryMiB != 81920 {
		t.Errorf("reserved memory: GPU 5 %d MiB (want 512 from the v2 call), GPU 7 %d of %d MiB (want 0 of 81920 from the v1 call)",
			devs[5].ReservedMiB, devs[7].ReservedMiB, devs[7].MemoryMiB)
	}
	d := devs[5]
	if d.Name != "NVIDIA H100 80GB HBM3" || d.MemoryMiB != 81920 || d.Architecture != gpu.ArchHopper ||
		d.ComputeCapability.String() != "9.0" || d.NUMANode != 1 || d.PCIBusID != "0000:68:00.0" || d.Path() != "/dev/nvidia5" {
		t.Errorf("device 5 = %+v", d)
	}
	topo, err := b.Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		for j := range 8 {
			l, ok := topo.Between(i, j)
			if i == j {
				continue
			}
			if !ok || l.String() != "NV18" {
				t.Errorf("link %d-%d = %v (known %v), want NV18", i, j, l, ok)
			}
		}
	}
}

func TestTopologyOfUnreadableGPUIsUnknown(t *testing.T) {
	s := fakeDGX(t)
	s.Devices[3].(*server.Device).GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		return gonvml.PciInfo{}, gonvml.ERROR_GPU_IS_LOST
	}
	b, err := Open(Options{Library: s})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := b.Topology(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := topo.Between(3, 0); ok {
		t.Error("link 3-0 known, want unknown for a GPU that cannot be read")
	}
	if l, ok := topo.Between(0, 1); !ok || l.NVLinks != 18 {
		t.Errorf("link 0-1 = %v, %v; other GPUs must stay known", l, ok)
	}
}

func TestMIGOnMockDGX(t *testing.T) {
	ctx := context.Background()
	s := fakeDGX(t)
	b, err := Open(Options{Library: s})
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := b.MIGProfiles(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]gpu.MIGProfile{}
	for _, p := range profiles {
		names[p.Name] = p
	}
	for _, want := range []string{"1g.10gb", "1g.10gb+me", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"} {
		if _, ok := names[want]; !ok {
			t.Errorf("profile %s missing from %v", want, names)
		}
	}
	if got := names["1g.10gb"].InstanceCount; got != 7 {
		t.Errorf("1g.10gb instance count = %d, want 7", got)
	}
	gi, err := b.CreateGPUInstance(ctx, 0, "3g.40gb", &gpu.Placement{Start: 4, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if gi.Placement != (gpu.Placement{Start: 4, Size: 4}) || gi.Profile != "3g.40gb" {
		t.Errorf("GPU instance = %+v", gi)
	}
	ci, err := b.CreateComputeInstance(ctx, 0, gi.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if ci.Profile != "3g.40gb" {
		t.Errorf("compute instance profile = %q, want 3g.40gb", ci.Profile)
	}
	if _, err := b.CreateGPUInstance(ctx, 0, "9g.90gb", nil); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("unknown profile: err = %v, want ErrNotFound", err)
	}
	gis, err := b.GPUInstances(ctx, 0)
	if err != nil || len(gis) != 1 {
		t.Fatalf("GPUInstances = %v, %v", gis, err)
	}
	if err := b.DestroyComputeInstance(ctx, 0, gi.ID, ci.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.DestroyGPUInstance(ctx, 0, gi.ID); err != nil {
		t.Fatal(err)
	}
	if gis, _ := b.GPUInstances(ctx, 0); len(gis) != 0 {
		t.Errorf("GPU instances left after destroy: %v", gis)
	}
}

func TestSampleCountsMissingFieldsAndLostGPU(t *testing.T) {
	ctx := context.Background()
	s := fakeDGX(t)
	dev := s.Devices[2].(*server.Device)
	dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{Gpu: 87, Memory: 40}, gonvml.SUCCESS
	}
	dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		return gonvml.Memory_v2{Total: 80 << 30, Used: 10 << 30, Free: 69 << 30, Reserved: 1 << 30}, gonvml.SUCCESS
	}
	notSupported := func(d *server.Device) {
		d.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetFieldValuesFunc = func([]gonvml.FieldValue) gonvml.Return { return gonvml.ERROR_NOT_SUPPORTED }
		d.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetPcieReplayCounterFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetTotalEccErrorsFunc = func(gonvml.MemoryErrorType, gonvml.EccCounterType) (uint64, gonvml.Return) {
			return 0, gonvml.ERROR_NOT_SUPPORTED
		}
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { return 0, 0, false, false, gonvml.ERROR_NOT_SUPPORTED }
		d.GetEncoderUtilizationFunc = func() (uint32, uint32, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetDecoderUtilizationFunc = func() (uint32, uint32, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GetVirtualizationModeFunc = func() (gonvml.GpuVirtualizationMode, gonvml.Return) {
			return gonvml.GPU_VIRTUALIZATION_MODE_NONE, gonvml.SUCCESS
		}
		d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) { return gonvml.GpmSupport{}, gonvml.SUCCESS }
	}
	notSupported(dev)
	b, err := Open(Options{Library: s})
	if err != nil {
		t.Fatal(err)
	}
	var smp gpu.Sample
	if err := b.Sample(ctx, 2, &smp); err != nil {
		t.Fatal(err)
	}
	if smp.GPUUtil != 87 || smp.MemCopyUtil != 40 || smp.FBUsedMiB != 10240 || smp.FBReservedMiB != 1024 || smp.MissingFieldsCount != 20 ||
		smp.Has != 0 || smp.Unsupported != gpu.ReadEncoderUtil|gpu.ReadDecoderUtil|gpu.ReadNVLink|gpu.ReadProfiling {
		t.Errorf("sample = %+v", smp)
	}
	lost := s.Devices[4].(*server.Device)
	notSupported(lost)
	lost.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{}, gonvml.ERROR_GPU_IS_LOST }
	lost.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) { return gonvml.Memory_v2{}, gonvml.ERROR_GPU_IS_LOST }
	lost.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST }
	if err := b.Sample(ctx, 4, &smp); !errors.Is(err, gpu.ErrGPULost) {
		t.Errorf("lost GPU: err = %v, want ErrGPULost", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Sample(ctx, 2, &smp); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
}

// TestSampleOptionalReadings runs the optional readings against a mock that
// answers them as an H100 vGPU would: video engines, NVLink throughput
// summed over all links, a vGPU license and GPM profiling from two samples.
func TestSampleOptionalReadings(t *testing.T) {
	ctx := context.Background()
	s := fakeDGX(t)
	dev := s.Devices[1].(*server.Device)
	dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{Gpu: 50}, gonvml.SUCCESS }
	dev.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 40, gonvml.SUCCESS }
	dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 300000, gonvml.SUCCESS }
	dev.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 1, gonvml.SUCCESS }
	dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 1980, gonvml.SUCCESS }
	dev.GetPcieReplayCounterFunc = func() (int, gonvml.Return) { return 0, gonvml.SUCCESS }
	dev.GetTotalEccErrorsFunc = func(gonvml.MemoryErrorType, gonvml.EccCounterType) (uint64, gonvml.Return) { return 0, gonvml.SUCCESS }
	dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { return 0, 0, false, false, gonvml.SUCCESS }
	dev.GetFieldValuesFunc = func(f []gonvml.FieldValue) gonvml.Return {
		for i := range f {
			var v uint64
			switch f[i].FieldId {
			case gonvml.FI_DEV_MEMORY_TEMP:
				v = 45
			case gonvml.FI_DEV_NVLINK_LINK_COUNT:
				v = 18
			case gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				if f[i].ScopeId != math.MaxUint32 {
					f[i].NvmlReturn = uint32(gonvml.ERROR_INVALID_ARGUMENT)
					continue
				}
				v = 1000
				if f[i].FieldId == gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
					v = 3000
				}
			}
			f[i].ValueType = uint32(gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.LittleEndian.PutUint64(f[i].Value[:], v)
			f[i].NvmlReturn = uint32(gonvml.SUCCESS)
		}
		return gonvml.SUCCESS
	}
	dev.GetEncoderUtilizationFunc = func() (uint32, uint32, gonvml.Return) { return 12, 167000, gonvml.SUCCESS }
	dev.GetDecoderUtilizationFunc = func() (uint32, uint32, gonvml.Return) { return 34, 167000, gonvml.SUCCESS }
	dev.GetVirtualizationModeFunc = func() (gonvml.GpuVirtualizationMode, gonvml.Return) {
		return gonvml.GPU_VIRTUALIZATION_MODE_VGPU, gonvml.SUCCESS
	}
	dev.GetGridLicensableFeaturesFunc = func() (gonvml.GridLicensableFeatures, gonvml.Return) {
		var f gonvml.GridLicensableFeatures
		f.LicensableFeaturesCount = 1
		f.GridLicensableFeatures[0].FeatureState = 1
		return f, gonvml.SUCCESS
	}
	dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
	}
	// Each sample buffer records which GPM sample it holds.
	taken := map[gonvml.GpmSample]int{}
	n := 0
	dev.GpmSampleGetFunc = func(smp gonvml.GpmSample) gonvml.Return { n++; taken[smp] = n; return gonvml.SUCCESS }
	s.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		return &mock.GpmSample{FreeFunc: func() gonvml.Return { return gonvml.SUCCESS }}, gonvml.SUCCESS
	}
	s.GpmMetricsGetFunc = func(g *gonvml.GpmMetricsGetType) gonvml.Return {
		if g.NumMetrics != 5 || taken[g.Sample2] != taken[g.Sample1]+1 {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		for i := range g.NumMetrics {
			m := &g.Metrics[i]
			m.NvmlReturn = uint32(gonvml.SUCCESS)
			switch gonvml.GpmMetricId(m.MetricId) {
			case gonvml.GPM_METRIC_GRAPHICS_UTIL:
				m.Value = 80
			case gonvml.GPM_METRIC_ANY_TENSOR_UTIL:
				m.Value = 40
			case gonvml.GPM_METRIC_DRAM_BW_UTIL:
				m.Value = 25
			case gonvml.GPM_METRIC_PCIE_TX_PER_SEC:
				m.Value = 1024
			case gonvml.GPM_METRIC_PCIE_RX_PER_SEC:
				m.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
			}
		}
		return gonvml.SUCCESS
	}
	b, err := Open(Options{Library: s})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var first, second gpu.Sample
	if err := b.Sample(ctx, 1, &first); err != nil {
		t.Fatal(err)
	}
	want := gpu.ReadEncoderUtil | gpu.ReadDecoderUtil | gpu.ReadNVLink | gpu.ReadVGPULicense
	if first.Has != want || first.EncoderUtil != 12 || first.DecoderUtil != 34 || first.NVLinkKiB != 4000 || !first.VGPULicensed {
		t.Errorf("first sample (no profiling before a second GPM sample): %+v", first)
	}
	b.gpm[1].dev.at = b.gpm[1].dev.at.Add(-time.Second) // as if a scrape interval passed
	if err := b.Sample(ctx, 1, &second); err != nil {
		t.Fatal(err)
	}
	wantProf := gpu.Profiling{GREngineActive: 0.8, TensorActive: 0.4, DRAMActive: 0.25, PCIeTxBytesPerSec: 1 << 30}
	if second.Has != want|gpu.ReadProfiling&^gpu.ReadPCIeRx || second.Profiling != wantProf || second.Unsupported != 0 {
		t.Errorf("second sample: has %b, profiling %+v, unsupported %b", second.Has, second.Profiling, second.Unsupported)
	}
}

func TestResetGPUNotSupported(t *testing.T) {
	b, err := Open(Options{Library: fakeDGX(t), Hostname: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	err = b.ResetGPU(context.Background(), 0)
	if !errors.Is(err, gpu.ErrNotSupported) || !strings.Contains(err.Error(), "nvidia-smi --gpu-reset -i 0") {
		t.Fatalf("ResetGPU = %v, want ErrNotSupported naming the manual reset", err)
	}
	if err := b.ResetGPU(context.Background(), 99); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("ResetGPU(99) = %v, want ErrNotFound", err)
	}
}
