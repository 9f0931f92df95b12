package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// ConfigAPIVersion is the apiVersion of gpuplane's opaque device
// configuration, given in a ResourceClaim's (or DeviceClass's)
// spec.devices.config[].opaque.parameters with driver DriverName.
const ConfigAPIVersion = "gpu.gpuplane.io/v1alpha1"

// Kinds of opaque configuration.
const (
	// KindGpuConfig configures whole GPUs.
	KindGpuConfig = "GpuConfig"
	// KindMigDeviceConfig configures MIG devices.
	KindMigDeviceConfig = "MigDeviceConfig"
)

// Sharing strategies, the value of Sharing.Strategy.
const (
	// StrategyTimeSlicing lets the claim's pods take turns on the GPU.
	StrategyTimeSlicing = "TimeSlicing"
	// StrategyMPS runs the claim's pods under one MPS control daemon with
	// per-client thread and memory limits.
	StrategyMPS = "MPS"
)

// Time-slice lengths, the value of TimeSlicingConfig.Interval.
const (
	IntervalDefault = "Default"
	IntervalShort   = "Short"
	IntervalMedium  = "Medium"
	IntervalLong    = "Long"
)

// MaxConfigBytes bounds the opaque parameters DecodeConfig reads. The API
// server caps them at 10 KiB.
const MaxConfigBytes = 10 << 10

// DeviceConfig is one decoded opaque configuration: a GpuConfig or a
// MigDeviceConfig.
type DeviceConfig struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Sharing    *Sharing `json:"sharing,omitempty"`
}

// Sharing says how the pods of one claim share its devices. Without it, the
// pods that reference the claim still share its devices, with the GPU's own
// default time slice.
type Sharing struct {
	// Strategy is TimeSlicing or MPS.
	Strategy          string             `json:"strategy"`
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MPSConfig         *MPSConfig         `json:"mpsConfig,omitempty"`
}

// TimeSlicingConfig sets the GPU's time slice.
type TimeSlicingConfig struct {
	// Interval is Default, Short, Medium or Long.
	Interval string `json:"interval,omitempty"`
}

// MPSConfig limits each MPS client of the claim.
type MPSConfig struct {
	// DefaultActiveThreadPercentage is the part of the device's SMs a
	// client may use, 1 to 100 (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit is the device memory a client may
	// pin on every device of the claim (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	// DefaultPerDevicePinnedMemoryLimit overrides it per device, keyed by
	// the device's UUID or index.
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// ErrConfig is wrapped by every error DecodeConfig and Validate return.
var ErrConfig = errors.New("invalid gpu.gpuplane.io device config")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

// DecodeConfig decodes opaque parameters strictly: at most MaxConfigBytes,
// one JSON object, no field the API does not define, apiVersion and kind
// known, and the values valid (Validate). Errors name the field and say
// what to write instead.
func DecodeConfig(raw []byte) (*DeviceConfig, error) {
	if len(raw) > MaxConfigBytes {
		return nil, configErr("parameters are %d bytes, more than the %d allowed", len(raw), MaxConfigBytes)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, configErr("parameters are not a JSON object: %v", err)
	}
	if head.APIVersion != ConfigAPIVersion {
		return nil, configErr("apiVersion: %q is not known; want %s", head.APIVersion, ConfigAPIVersion)
	}
	if head.Kind != KindGpuConfig && head.Kind != KindMigDeviceConfig {
		return nil, configErr("kind: %q is not known; want %s or %s", head.Kind, KindGpuConfig, KindMigDeviceConfig)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c DeviceConfig
	if err := dec.Decode(&c); err != nil {
		return nil, configErr("%s: %s", c.kindOr(head.Kind), strictMessage(err))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *DeviceConfig) kindOr(k string) string {
	if c.Kind != "" {
		return c.Kind
	}
	return k
}

// strictMessage turns encoding/json's unknown-field error into one that
// names the field and what to do.
func strictMessage(err error) string {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f + "; the fields are apiVersion, kind and sharing (strategy, timeSlicingConfig.interval, mpsConfig.defaultActiveThreadPercentage, mpsConfig.defaultPinnedDeviceMemoryLimit, mpsConfig.defaultPerDevicePinnedMemoryLimit)"
	}
	return msg
}

// Validate checks the values of a decoded config.
func (c *DeviceConfig) Validate() error {
	s := c.Sharing
	if s == nil {
		return nil
	}
	switch s.Strategy {
	case StrategyTimeSlicing:
		if c.Kind == KindMigDeviceConfig {
			return configErr("%s: sharing.strategy: MIG devices cannot be time-sliced; use %s, or claim a whole GPU with a %s", c.Kind, StrategyMPS, KindGpuConfig)
		}
		if s.MPSConfig != nil {
			return configErr("%s: sharing.mpsConfig: set only with strategy %s", c.Kind, StrategyMPS)
		}
		if t := s.TimeSlicingConfig; t != nil {
			switch t.Interval {
			case "", IntervalDefault, IntervalShort, IntervalMedium, IntervalLong:
			default:
				return configErr("%s: sharing.timeSlicingConfig.interval: %q is not an interval; want %s, %s, %s or %s",
					c.Kind, t.Interval, IntervalDefault, IntervalShort, IntervalMedium, IntervalLong)
			}
		}
	case StrategyMPS:
		if s.TimeSlicingConfig != nil {
			return configErr("%s: sharing.timeSlicingConfig: set only with strategy %s", c.Kind, StrategyTimeSlicing)
		}
		m := s.MPSConfig
		if m == nil {
			return nil
		}
		if p := m.DefaultActiveThreadPercentage; p != nil && (*p < 1 || *p > 100) {
			return configErr("%s: sharing.mpsConfig.defaultActiveThreadPercentage: must be 1 to 100, got %d", c.Kind, *p)
		}
		if q := m.DefaultPinnedDeviceMemoryLimit; q != nil && q.Sign() <= 0 {
			return configErr("%s: sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: must be positive, got %s", c.Kind, q.String())
		}
		if len(m.DefaultPerDevicePinnedMemoryLimit) > 64 {
			return configErr("%s: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: %d entries, at most 64 (one per device)", c.Kind, len(m.DefaultPerDevicePinnedMemoryLimit))
		}
		for k, q := range m.DefaultPerDevicePinnedMemoryLimit {
			if k == "" || q.Sign() <= 0 {
				return configErr("%s: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[%q]: want a device UUID or index and a positive quantity, got %s", c.Kind, k, q.String())
			}
		}
	case "":
		return configErr("%s: sharing.strategy: required; want %s or %s", c.Kind, StrategyTimeSlicing, StrategyMPS)
	default:
		return configErr("%s: sharing.strategy: %q is not a strategy; want %s or %s", c.Kind, s.Strategy, StrategyTimeSlicing, StrategyMPS)
	}
	return nil
}

// PinnedMemoryLimit is the MPS pinned-memory limit of the device with the
// given UUID and index, in bytes, and whether one is set.
func (m *MPSConfig) PinnedMemoryLimit(uuid, index string) (int64, bool) {
	if m == nil {
		return 0, false
	}
	for _, k := range []string{uuid, index} {
		if q, ok := m.DefaultPerDevicePinnedMemoryLimit[k]; ok {
			return q.Value(), true
		}
	}
	if m.DefaultPinnedDeviceMemoryLimit != nil {
		return m.DefaultPinnedDeviceMemoryLimit.Value(), true
	}
	return 0, false
}
