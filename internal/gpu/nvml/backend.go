package nvml

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// DefaultLibrary is the NVML library go-nvml loads.
const DefaultLibrary = "libnvidia-ml.so.1"

// Options configure Open.
type Options struct {
	// Library is the NVML implementation; nil loads the real library from
	// LibraryPath. Tests pass go-nvml's mock servers here.
	Library gonvml.Interface
	// LibraryPath overrides where the real library is loaded from.
	LibraryPath string
	// SysfsRoot is where PCI devices' numa_node files are read when NVML
	// cannot tell the NUMA node ("/sys" by default).
	SysfsRoot string
	// Hostname is reported in SystemInfo (os.Hostname by default).
	Hostname string
	// SMI runs nvidia-smi with the given arguments (SetTimeSlice uses its
	// compute-policy command, which NVML's public API does not offer);
	// nil runs the nvidia-smi on $PATH.
	SMI func(ctx context.Context, args ...string) error
}

// Backend is gpu.Backend on NVML. It is safe for concurrent use.
type Backend struct {
	lib       gonvml.Interface
	sysfsRoot string
	hostname  string
	smi       func(ctx context.Context, args ...string) error

	mu      sync.Mutex
	closed  bool
	handles []gonvml.Device
	// procTS remembers, per GPU, the newest process utilization sample
	// seen, so each call asks NVML only for newer ones.
	procTS []uint64
	fields [][]gonvml.FieldValue
	gpm    []*gpmState
	// slices are the time slices this backend set, by GPU index.
	slices map[int]gpu.TimeSlice
	// fabricV reads the versioned fabric info; go-nvml's handler for it
	// reaches the C library directly, so tests put a fake here.
	fabricV func(gonvml.Device) (gonvml.GpuFabricInfo_v2, gonvml.Return)
}

var _ gpu.Backend = (*Backend)(nil)

// Open initializes NVML. On failure it returns an *InitError that says what
// is missing and how to fix it, and it makes no further NVML call.
func Open(opts Options) (*Backend, error) {
	lib := opts.Library
	path := opts.LibraryPath
	if path == "" {
		path = DefaultLibrary
	}
	if lib == nil {
		lib = gonvml.New(gonvml.WithLibraryPath(path))
	}
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		return nil, initError(ret, path)
	}
	b := &Backend{lib: lib, sysfsRoot: opts.SysfsRoot, hostname: opts.Hostname, smi: opts.SMI, fabricV: fabricInfoV}
	if b.smi == nil {
		b.smi = runSMI
	}
	if b.sysfsRoot == "" {
		b.sysfsRoot = "/sys"
	}
	if b.hostname == "" {
		b.hostname, _ = os.Hostname()
	}
	count, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		_ = lib.Shutdown()
		return nil, retError("counting GPUs", ret)
	}
	for i := range count {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			// A GPU that does not answer still holds its index; calls about
			// it return the error instead of hiding the GPU.
			h = nil
		}
		b.handles = append(b.handles, h)
	}
	b.procTS = make([]uint64, count)
	b.fields = make([][]gonvml.FieldValue, count)
	b.gpm = make([]*gpmState, count)
	for i := range b.fields {
		b.fields[i] = make([]gonvml.FieldValue, numFields)
		b.gpm[i] = &gpmState{mig: map[int]*gpmPair{}}
	}
	return b, nil
}

// Name implements gpu.Backend.
func (b *Backend) Name() string { return "nvml" }

// Close shuts NVML down. Later calls fail with gpu.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	for _, st := range b.gpm {
		st.free()
	}
	return retError("shutting down NVML", b.lib.Shutdown())
}

func (b *Backend) handle(index int) (gonvml.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, gpu.ErrClosed
	}
	if index < 0 || index >= len(b.handles) {
		return nil, fmt.Errorf("gpu %d: %w (node has %d GPUs)", index, gpu.ErrNotFound, len(b.handles))
	}
	if b.handles[index] == nil {
		return nil, fmt.Errorf("gpu %d: %w: no handle at start-up", index, gpu.ErrGPULost)
	}
	return b.handles[index], nil
}

// System implements gpu.Inventory.
func (b *Backend) System(context.Context) (gpu.SystemInfo, error) {
	if _, err := b.checkOpen(); err != nil {
		return gpu.SystemInfo{}, err
	}
	var info gpu.SystemInfo
	var ret gonvml.Return
	if info.DriverVersion, ret = b.lib.SystemGetDriverVersion(); ret != gonvml.SUCCESS {
		return info, retError("reading driver version", ret)
	}
	if info.NVMLVersion, ret = b.lib.SystemGetNVMLVersion(); ret != gonvml.SUCCESS {
		return info, retError("reading NVML version", ret)
	}
	cuda, ret := b.lib.SystemGetCudaDriverVersion()
	if ret != gonvml.SUCCESS {
		return info, retError("reading CUDA driver version", ret)
	}
	info.CUDADriverVersion = gpu.CUDAVersion(cuda)
	info.Hostname = b.hostname
	return info, nil
}

func (b *Backend) checkOpen() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, gpu.ErrClosed
	}
	return len(b.handles), nil
}

// Devices implements gpu.Inventory.
func (b *Backend) Devices(ctx context.Context) ([]gpu.Device, error) {
	n, err := b.checkOpen()
	if err != nil {
		return nil, err
	}
	devs := make([]gpu.Device, 0, n)
	for i := range n {
		d, err := b.device(i)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func (b *Backend) device(index int) (gpu.Device, error) {
	h, err := b.handle(index)
	if err != nil {
		return gpu.Device{}, err
	}
	d := gpu.Device{Index: index, NUMANode: -1}
	var ret gonvml.Return
	wrap := func(what string, ret gonvml.Return) error {
		return retError(fmt.Sprintf("gpu %d: reading %s", index, what), ret)
	}
	if d.UUID, ret = h.GetUUID(); ret != gonvml.SUCCESS {
		return d, wrap("UUID", ret)
	}
	if d.Minor, ret = h.GetMinorNumber(); ret != gonvml.SUCCESS {
		return d, wrap("minor number", ret)
	}
	if d.Name, ret = h.GetName(); ret != gonvml.SUCCESS {
		return d, wrap("name", ret)
	}
	if brand, ret := h.GetBrand(); ret == gonvml.SUCCESS {
		d.Brand = gpu.BrandFromNVML(int(brand))
	}
	if d.ComputeCapability.Major, d.ComputeCapability.Minor, ret = h.GetCudaComputeCapability(); ret != gonvml.SUCCESS {
		return d, wrap("compute capability", ret)
	}
	d.Architecture = gpu.ArchitectureFromComputeCapability(d.ComputeCapability)
	if arch, ret := h.GetArchitecture(); ret == gonvml.SUCCESS {
		if a := gpu.ArchitectureFromNVML(int(arch)); a != gpu.ArchUnknown {
			d.Architecture = a
		}
	}
	// The v2 call also says what the driver reserves; drivers before
	// R510 have only the first.
	if mem, ret := h.GetMemoryInfo_v2(); ret == gonvml.SUCCESS && mem.Reserved < mem.Total {
		d.MemoryMiB, d.ReservedMiB = mem.Total/(1<<20), mem.Reserved/(1<<20)
	} else {
		mem, ret := h.GetMemoryInfo()
		if ret != gonvml.SUCCESS {
			return d, wrap("memory", ret)
		}
		d.MemoryMiB = mem.Total / (1 << 20)
	}
	pci, ret := h.GetPciInfo()
	if ret != gonvml.SUCCESS {
		return d, wrap("PCI info", ret)
	}
	d.PCIBusID = busID(pci)
	d.PCIDeviceID = pci.PciDeviceId
	d.NUMANode = b.numaNode(h, d.PCIBusID)
	if cur, pending, ret := h.GetMigMode(); ret == gonvml.SUCCESS {
		d.MIG = gpu.MIGMode{Capable: true, Current: cur == gonvml.DEVICE_MIG_ENABLE, Pending: pending == gonvml.DEVICE_MIG_ENABLE}
	}
	if d.MIG.Current {
		migs, err := b.migDevices(h, &d)
		if err != nil {
			return d, err
		}
		d.MIGDevices = migs
	}
	return d, nil
}

// busID renders a PCI bus ID as sysfs names devices: 0000:07:00.0. NVML
// writes an eight-digit domain.
func busID(p gonvml.PciInfo) string {
	var sb strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	s := strings.ToLower(sb.String())
	if s == "" {
		return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	if i := strings.IndexByte(s, ':'); i > 4 {
		s = s[i-4:]
	}
	return s
}

func (b *Backend) numaNode(h gonvml.Device, bus string) int {
	if n, ret := h.GetNumaNodeId(); ret == gonvml.SUCCESS {
		return n
	}
	raw, err := os.ReadFile(filepath.Join(b.sysfsRoot, "bus", "pci", "devices", bus, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}
