package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"math/bits"
	"time"
)

// Inventory reports what GPUs a node has and how they connect.
type Inventory interface {
	// System returns the driver stack versions.
	System(ctx context.Context) (SystemInfo, error)
	// Devices returns every GPU, ordered by index, with its MIG devices.
	Devices(ctx context.Context) ([]Device, error)
	// Topology returns the pairwise links between GPUs. A GPU whose links
	// cannot be read has unknown links; that is not an error.
	Topology(ctx context.Context) (*Topology, error)
}

// ECCCounts are error-correcting-code counters of one GPU.
type ECCCounts struct {
	VolatileSingleBit  uint64 `json:"volatileSingleBit"`
	VolatileDoubleBit  uint64 `json:"volatileDoubleBit"`
	AggregateSingleBit uint64 `json:"aggregateSingleBit"`
	AggregateDoubleBit uint64 `json:"aggregateDoubleBit"`
}

// RemappedRows are the row-remapping counters of one GPU.
type RemappedRows struct {
	Correctable   uint64 `json:"correctable"`
	Uncorrectable uint64 `json:"uncorrectable"`
	Pending       bool   `json:"pending"`
	Failure       bool   `json:"failure"`
}

// Sample is one telemetry reading of a GPU. It is a plain value so that a
// caller can reuse one Sample for every reading without allocating.
type Sample struct {
	GPUUtil       uint32 `json:"gpuUtil"`       // percent
	MemCopyUtil   uint32 `json:"memCopyUtil"`   // percent
	FBUsedMiB     uint64 `json:"fbUsedMiB"`     // framebuffer used
	FBFreeMiB     uint64 `json:"fbFreeMiB"`     // framebuffer free
	FBReservedMiB uint64 `json:"fbReservedMiB"` // reserved by the driver
	GPUTempC      uint32 `json:"gpuTempC"`
	MemoryTempC   uint32 `json:"memoryTempC"`
	PowerMilliW   uint32 `json:"powerMilliW"`
	// EnergyMilliJ is the total energy since the driver loaded.
	EnergyMilliJ       uint64       `json:"energyMilliJ"`
	SMClockMHz         uint32       `json:"smClockMHz"`
	MemClockMHz        uint32       `json:"memClockMHz"`
	PCIeReplayCounter  uint64       `json:"pcieReplayCounter"`
	ECC                ECCCounts    `json:"ecc"`
	RemappedRows       RemappedRows `json:"remappedRows"`
	LastXID            uint64       `json:"lastXID"`
	XIDCount           uint64       `json:"xidCount"`
	Timestamp          time.Time    `json:"timestamp"`
	MissingFieldsCount int          `json:"missingFields"` // fields the GPU does not report

	// The readings below are not offered by every GPU. Has says which this
	// sample holds; Unsupported says which the GPU will never offer, as
	// opposed to those it cannot give yet (profiling needs two readings
	// apart in time) or that do not apply (a license on bare metal).
	Has         Readings `json:"has"`
	Unsupported Readings `json:"unsupported,omitempty"`
	// EncoderUtil and DecoderUtil are the video engines' utilization,
	// percent.
	EncoderUtil uint32 `json:"encoderUtil"`
	DecoderUtil uint32 `json:"decoderUtil"`
	// NVLinkKiB is the NVLink data (payload, without protocol headers)
	// the GPU sent and received over all its links since the driver
	// loaded, in KiB.
	NVLinkKiB uint64 `json:"nvlinkKiB"`
	// VGPULicensed says whether a vGPU (a GPU seen from inside a VM) holds
	// a license. Not a reading of bare-metal or passthrough GPUs.
	VGPULicensed bool `json:"vgpuLicensed"`
	// Profiling is the whole GPU's profiling readings.
	Profiling Profiling `json:"profiling"`
	// MIGProfiling holds the profiling readings of the GPU's first
	// MIGProfilingCount GPU instances. A fixed array, so that a Sample stays
	// a plain value.
	MIGProfiling      [MaxGPUInstances]MIGProfiling `json:"migProfiling"`
	MIGProfilingCount int                           `json:"migProfilingCount"`
}

// MaxGPUInstances bounds the MIG GPU instances of one GPU (seven on every
// MIG-capable GPU so far).
const MaxGPUInstances = 8

// Readings is a set of the optional readings of a Sample.
type Readings uint32

// Optional readings.
const (
	ReadEncoderUtil Readings = 1 << iota
	ReadDecoderUtil
	ReadNVLink
	ReadVGPULicense
	ReadGREngineActive
	ReadTensorActive
	ReadDRAMActive
	ReadPCIeTx
	ReadPCIeRx
)

// ReadProfiling is every profiling reading.
const ReadProfiling = ReadGREngineActive | ReadTensorActive | ReadDRAMActive | ReadPCIeTx | ReadPCIeRx

// Count returns how many readings r holds.
func (r Readings) Count() int { return bits.OnesCount32(uint32(r)) }

// Profiling is what a GPU's performance monitors measured between two
// readings: ratios of time (0 to 1) and PCIe rates, averaged over the
// interval.
type Profiling struct {
	// GREngineActive is the part of the time the graphics or compute
	// engine was busy.
	GREngineActive float64 `json:"grEngineActive"`
	// TensorActive is the part of the time the SMs ran tensor operations.
	TensorActive float64 `json:"tensorActive"`
	// DRAMActive is the device memory bandwidth used over its maximum.
	DRAMActive float64 `json:"dramActive"`
	// PCIeTxBytesPerSec and PCIeRxBytesPerSec are the data the GPU sent
	// and received over PCIe, protocol headers included.
	PCIeTxBytesPerSec float64 `json:"pcieTxBytesPerSec"`
	PCIeRxBytesPerSec float64 `json:"pcieRxBytesPerSec"`
}

// MIGProfiling is the profiling readings of one MIG GPU instance.
type MIGProfiling struct {
	GPUInstanceID int       `json:"gpuInstanceID"`
	Has           Readings  `json:"has"`
	Profiling     Profiling `json:"profiling"`
}

// Process is a compute process running on a GPU.
type Process struct {
	PID uint32 `json:"pid"`
	// UsedMemMiB is the framebuffer the process holds.
	UsedMemMiB uint64 `json:"usedMemMiB"`
	// SMUtil and MemUtil are the process's recent utilization, percent.
	SMUtil  uint32 `json:"smUtil"`
	MemUtil uint32 `json:"memUtil"`
	// GPUInstanceID and ComputeInstanceID place the process in a MIG device;
	// both are -1 on a GPU without MIG.
	GPUInstanceID     int `json:"gpuInstanceID"`
	ComputeInstanceID int `json:"computeInstanceID"`
}

// Telemetry reads a GPU's live counters.
type Telemetry interface {
	// Sample fills s with the current readings of the GPU at index. It does
	// not allocate.
	Sample(ctx context.Context, index int, s *Sample) error
	// Processes appends the GPU's running compute processes to buf and
	// returns it.
	Processes(ctx context.Context, index int, buf []Process) ([]Process, error)
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventXID is a critical XID error on a GPU.
	EventXID EventKind = iota + 1
	// EventECCSingleBit is a corrected memory error.
	EventECCSingleBit
	// EventECCDoubleBit is an uncorrectable memory error.
	EventECCDoubleBit
	// EventMonitorError says that waiting for events failed. The devices
	// are not known to be broken; the subscription keeps trying.
	EventMonitorError
	// EventMonitorRecovered follows EventMonitorError once waiting works
	// again.
	EventMonitorRecovered
)

func (k EventKind) String() string {
	switch k {
	case EventXID:
		return "xid"
	case EventECCSingleBit:
		return "ecc-single-bit"
	case EventECCDoubleBit:
		return "ecc-double-bit"
	case EventMonitorError:
		return "monitor-error"
	case EventMonitorRecovered:
		return "monitor-recovered"
	}
	return "unknown"
}

// Event is something a GPU reported, or a change in the health of the
// subscription itself.
type Event struct {
	Kind EventKind
	// UUID and Index name the GPU; empty and -1 for monitor events.
	UUID  string
	Index int
	// XID is the XID code for EventXID.
	XID uint64
	// GPUInstanceID and ComputeInstanceID name the MIG device the event
	// concerns, or are -1 when it concerns the whole GPU.
	GPUInstanceID     int
	ComputeInstanceID int
	// Err is the failure for EventMonitorError.
	Err  error
	Time time.Time
}

// Subscription delivers events until it is closed or its context ends.
type Subscription interface {
	// Events is closed when the subscription ends.
	Events() <-chan Event
	// Unmonitored lists GPUs (by UUID) whose events could not be registered;
	// their health cannot be watched and callers should say so.
	Unmonitored() map[string]error
	Close() error
}

// Events subscribes to critical GPU events.
type Events interface {
	// Subscribe starts watching every GPU. A failed wait is reported as an
	// EventMonitorError and retried; it never closes the subscription.
	Subscribe(ctx context.Context) (Subscription, error)
}

// MIGManager partitions MIG-capable GPUs.
type MIGManager interface {
	// SetMIGMode enables or disables MIG on a GPU. The change may be pending
	// until the GPU is reset; Devices reports both states.
	SetMIGMode(ctx context.Context, index int, enabled bool) error
	// MIGProfiles lists the GPU instance profiles the GPU supports, with
	// their possible placements.
	MIGProfiles(ctx context.Context, index int) ([]MIGProfile, error)
	// CreateGPUInstance creates a GPU instance of the named profile, at the
	// given placement or, when placement is nil, the first free one.
	CreateGPUInstance(ctx context.Context, index int, profile string, placement *Placement) (GPUInstance, error)
	// CreateComputeInstance creates a compute instance in a GPU instance.
	// An empty profile means one spanning the whole GPU instance.
	CreateComputeInstance(ctx context.Context, index, gpuInstanceID int, profile string) (ComputeInstance, error)
	// DestroyComputeInstance destroys a compute instance.
	DestroyComputeInstance(ctx context.Context, index, gpuInstanceID, computeInstanceID int) error
	// DestroyGPUInstance destroys a GPU instance; it must have no compute
	// instances left.
	DestroyGPUInstance(ctx context.Context, index, gpuInstanceID int) error
	// GPUInstances lists a GPU's GPU instances.
	GPUInstances(ctx context.Context, index int) ([]GPUInstance, error)
}

// Resetter is an optional capability of a Backend: resetting one GPU, as
// the quarantine does after a fault whose documented resolution is a
// reset. Detect it with a type assertion.
type Resetter interface {
	// ResetGPU resets the GPU at index: its state, memory errors pending
	// a reset and MIG instances are cleared, and a GPU that fell off the
	// bus may answer again. It fails with an error wrapping ErrInUse
	// while processes use the GPU, ErrGPULost when the GPU stays off the
	// bus, and ErrNotSupported when the driver offers no reset through
	// this backend (the error says how to reset it by hand).
	ResetGPU(ctx context.Context, index int) error
}

// Backend is a whole node's GPUs.
type Backend interface {
	Inventory
	Telemetry
	Events
	MIGManager
	// Name identifies the backend ("nvml", "sim:dgxh100", "null").
	Name() string
	// Close releases the backend. Calls after Close fail with ErrClosed.
	Close() error
}

// Sentinel errors. Backends wrap them so callers can use errors.Is.
var (
	// ErrNotSupported: the GPU or driver does not offer the operation.
	ErrNotSupported = errors.New("not supported by this GPU or driver")
	// ErrGPULost: the GPU fell off the bus and no longer answers.
	ErrGPULost = errors.New("GPU is lost (fell off the bus)")
	// ErrInsufficientResources: not enough free MIG slices or instances.
	ErrInsufficientResources = errors.New("insufficient resources")
	// ErrNotFound: no such GPU, profile or instance.
	ErrNotFound = errors.New("not found")
	// ErrInUse: the instance still has compute instances or processes.
	ErrInUse = errors.New("in use")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("backend is closed")
	// ErrNoDriver: the NVIDIA driver's management library is absent.
	ErrNoDriver = errors.New("NVIDIA driver not found")
)

// MarshalJSON renders the topology as the nvidia-smi matrix of link codes.
func (t *Topology) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Matrix [][]string `json:"matrix"`
	}{t.Matrix()})
}
