package v1

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Version is the only config version this package reads.
const Version = "v1"

// MIG strategies.
const (
	MIGStrategyNone   = "none"
	MIGStrategySingle = "single"
	MIGStrategyMixed  = "mixed"
)

// Device list strategies: how Allocate tells the runtime which devices a
// container gets.
const (
	DeviceListStrategyEnvVar         = "envvar"
	DeviceListStrategyVolumeMounts   = "volume-mounts"
	DeviceListStrategyCDIAnnotations = "cdi-annotations"
	DeviceListStrategyCDICRI         = "cdi-cri"
)

// Device ID strategies: how devices are named in the container contract.
const (
	DeviceIDStrategyUUID  = "uuid"
	DeviceIDStrategyIndex = "index"
)

// Allocation policies for shared devices.
const (
	AllocationDistributed = "distributed"
	AllocationPacked      = "packed"
)

// DefaultResourceName is the resource of whole GPUs.
const DefaultResourceName = gpunode.ResourceGPU

// Config is a whole v1 config file.
type Config struct {
	Version   string    `json:"version"`
	Flags     Flags     `json:"flags,omitempty"`
	Resources Resources `json:"resources,omitempty"`
	Sharing   Sharing   `json:"sharing,omitempty"`
	// Imex is NVIDIA's IMEX channel setting. It is read so NVIDIA configs
	// load; gpuplane does not act on it yet.
	Imex Imex `json:"imex,omitempty"`
	// Health is a gpuplane extension.
	Health Health `json:"health,omitempty"`
}

// Flags are the settings NVIDIA's plugin also takes on its command line.
type Flags struct {
	MIGStrategy             *string     `json:"migStrategy,omitempty"`
	FailOnInitError         *bool       `json:"failOnInitError,omitempty"`
	NvidiaDriverRoot        *string     `json:"nvidiaDriverRoot,omitempty"`
	NvidiaDevRoot           *string     `json:"nvidiaDevRoot,omitempty"`
	GDSEnabled              *bool       `json:"gdsEnabled,omitempty"`
	MOFEDEnabled            *bool       `json:"mofedEnabled,omitempty"`
	UseNodeFeatureAPI       *bool       `json:"useNodeFeatureAPI,omitempty"`
	DeviceDiscoveryStrategy *string     `json:"deviceDiscoveryStrategy,omitempty"`
	Plugin                  PluginFlags `json:"plugin,omitempty"`
	GFD                     GFDFlags    `json:"gfd,omitempty"`
}

// PluginFlags are the device plugin's own flags.
type PluginFlags struct {
	PassDeviceSpecs     *bool              `json:"passDeviceSpecs,omitempty"`
	DeviceListStrategy  DeviceListStrategy `json:"deviceListStrategy,omitempty"`
	DeviceIDStrategy    *string            `json:"deviceIDStrategy,omitempty"`
	CDIAnnotationPrefix *string            `json:"cdiAnnotationPrefix,omitempty"`
	NvidiaCTKPath       *string            `json:"nvidiaCTKPath,omitempty"`
	ContainerDriverRoot *string            `json:"containerDriverRoot,omitempty"`
	MPSRoot             *string            `json:"mpsRoot,omitempty"`
}

// GFDFlags belong to GPU Feature Discovery; they are read so that one
// NVIDIA config file serves both, and used by the labels part.
type GFDFlags struct {
	Oneshot         *bool     `json:"oneshot,omitempty"`
	NoTimestamp     *bool     `json:"noTimestamp,omitempty"`
	OutputFile      *string   `json:"outputFile,omitempty"`
	SleepInterval   *Duration `json:"sleepInterval,omitempty"`
	MachineTypeFile *string   `json:"machineTypeFile,omitempty"`
}

// Imex is NVIDIA's IMEX setting.
type Imex struct {
	ChannelIDs []int `json:"channelIDs,omitempty"`
	Required   *bool `json:"required,omitempty"`
}

// DeviceListStrategy is one strategy or several; the file may give a single
// string or a list.
type DeviceListStrategy []string

// UnmarshalJSON accepts "envvar" as well as ["envvar", "cdi-cri"].
func (s *DeviceListStrategy) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = DeviceListStrategy{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %s", b)
	}
	*s = many
	return nil
}

// Resources renames GPUs and MIG devices by pattern.
type Resources struct {
	GPUs []NamedResource `json:"gpus,omitempty"`
	MIGs []NamedResource `json:"mig,omitempty"`
}

// NamedResource maps devices whose product name (GPUs) or profile (MIG)
// matches Pattern (a glob) to resource Name.
type NamedResource struct {
	Pattern string `json:"pattern"`
	Name    string `json:"name"`
}

// Sharing says how GPUs are shared.
type Sharing struct {
	TimeSlicing ReplicatedResources `json:"timeSlicing,omitempty"`
	MPS         ReplicatedResources `json:"mps,omitempty"`
	// AllocationPolicy is a gpuplane extension: "distributed" spreads a
	// request over the least used physical GPUs, "packed" fills one GPU
	// before the next.
	AllocationPolicy string `json:"allocationPolicy,omitempty"`
}

// ReplicatedResources is one sharing mode's settings.
type ReplicatedResources struct {
	RenameByDefault            bool                 `json:"renameByDefault,omitempty"`
	FailRequestsGreaterThanOne bool                 `json:"failRequestsGreaterThanOne,omitempty"`
	Resources                  []ReplicatedResource `json:"resources,omitempty"`
}

// ReplicatedResource shares the selected devices of one resource.
type ReplicatedResource struct {
	Name     string            `json:"name"`
	Rename   string            `json:"rename,omitempty"`
	Devices  ReplicatedDevices `json:"devices,omitempty"`
	Replicas int               `json:"replicas"`
}

// ReplicatedDevices selects devices: all of them (the default), the first
// Count, or a list of indexes ("0", "1:2" for a MIG device) and UUIDs.
type ReplicatedDevices struct {
	All   bool
	Count int
	List  []string
}

// UnmarshalJSON reads "all", a count, or a list of indexes and UUIDs.
func (d *ReplicatedDevices) UnmarshalJSON(b []byte) error {
	*d = ReplicatedDevices{}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "all" {
			return fmt.Errorf("want \"all\", a count or a list of GPU indexes or UUIDs, got %q", s)
		}
		d.All = true
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		if n <= 0 {
			return fmt.Errorf("a device count must be >= 1, got %d", n)
		}
		d.Count = n
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("want \"all\", a count or a list of GPU indexes or UUIDs, got %s", b)
	}
	for _, raw := range list {
		var item string
		if err := json.Unmarshal(raw, &item); err == nil {
			d.List = append(d.List, strings.TrimSpace(item))
			continue
		}
		var idx int
		if err := json.Unmarshal(raw, &idx); err != nil || idx < 0 {
			return fmt.Errorf("want a GPU index or UUID in the device list, got %s", raw)
		}
		d.List = append(d.List, strconv.Itoa(idx))
	}
	if len(d.List) == 0 {
		return fmt.Errorf("an empty device list selects nothing; omit devices to select all")
	}
	return nil
}

// MarshalJSON writes the selection back in the file's form.
func (d ReplicatedDevices) MarshalJSON() ([]byte, error) {
	switch {
	case d.Count > 0:
		return json.Marshal(d.Count)
	case len(d.List) > 0:
		return json.Marshal(d.List)
	}
	return json.Marshal("all")
}

// Selects reports whether the selection includes the GPU at index with
// uuid, or, for a MIG device, the "gpu:mig" index form. n is the position
// of the device among those considered, for Count.
func (d ReplicatedDevices) Selects(position int, index, uuid string) bool {
	switch {
	case d.Count > 0:
		return position < d.Count
	case len(d.List) > 0:
		for _, s := range d.List {
			if s == index || strings.EqualFold(s, uuid) {
				return true
			}
		}
		return false
	}
	return true
}

// Health is gpuplane's health-check policy (an extension).
type Health struct {
	// Disabled switches health checks off entirely.
	Disabled bool `json:"disabled,omitempty"`
	// IgnoredXIDs are XIDs treated as harmless in addition to NVIDIA's
	// defaults (13, 31, 43, 45, 68, 109).
	IgnoredXIDs []uint64 `json:"ignoredXIDs,omitempty"`
	// CriticalXIDs are XIDs treated as critical even when ignored by
	// default.
	CriticalXIDs []uint64 `json:"criticalXIDs,omitempty"`
	// Probation is how long a device must stay free of critical events, and
	// answer NVML, before it is Healthy again. Zero means never recover
	// (NVIDIA's behaviour). Default 60s.
	Probation *Duration `json:"probation,omitempty"`
	// Quarantine is what happens after a critical fault: Node condition,
	// taint, eviction of the GPU's pods, reset and revalidation.
	Quarantine Quarantine `json:"quarantine,omitempty"`
}

// Duration is a time.Duration written as "30s".
type Duration struct{ time.Duration }

// UnmarshalJSON reads "30s" (or a number of seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration such as \"30s\", got %q", s)
		}
		if v < 0 {
			return fmt.Errorf("a duration must not be negative, got %q", s)
		}
		d.Duration = v
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil || secs < 0 {
		return fmt.Errorf("want a duration such as \"30s\", got %s", b)
	}
	d.Duration = time.Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the duration as "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }
