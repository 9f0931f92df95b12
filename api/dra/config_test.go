package dra

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "gpu time-slicing", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`},
		{name: "gpu mps", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"0":"5Gi"}}}}`},
		{name: "mig mps", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`},
		{name: "no sharing", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig"}`},
		{name: "unknown field", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"threads":5}}}`, wantErr: `unknown field "threads"`},
		{name: "unknown top field", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","replicas":2}`, wantErr: `unknown field "replicas"`},
		{name: "wrong apiVersion", in: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`, wantErr: "apiVersion"},
		{name: "wrong kind", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"TpuConfig"}`, wantErr: "kind"},
		{name: "mig time-slicing", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`, wantErr: "MIG devices cannot be time-sliced"},
		{name: "bad strategy", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"Spatial"}}`, wantErr: "sharing.strategy"},
		{name: "missing strategy", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{}}`, wantErr: "sharing.strategy: required"},
		{name: "bad interval", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`, wantErr: "interval"},
		{name: "threads out of range", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":0}}}`, wantErr: "1 to 100"},
		{name: "negative memory", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"-1Gi"}}}`, wantErr: "must be positive"},
		{name: "mixed configs", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","mpsConfig":{}}}`, wantErr: "sharing.mpsConfig"},
		{name: "trailing", in: `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig"} {}`, wantErr: "after top-level value"},
		{name: "not json", in: `apiVersion: x`, wantErr: "not a JSON object"},
		{name: "too large", in: `{"apiVersion":"` + strings.Repeat("x", MaxConfigBytes) + `"}`, wantErr: "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DecodeConfig([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeConfig: %v", err)
				}
				if c.APIVersion != ConfigAPIVersion {
					t.Errorf("apiVersion = %q", c.APIVersion)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("DecodeConfig error = %v, want one containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
		})
	}
}

func TestPinnedMemoryLimit(t *testing.T) {
	c, err := DecodeConfig([]byte(`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"1Gi","defaultPerDevicePinnedMemoryLimit":{"GPU-a":"2Gi","3":"3Gi"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Sharing.MPSConfig
	for _, tt := range []struct {
		uuid, index string
		want        int64
	}{{"GPU-a", "0", 2 << 30}, {"GPU-b", "3", 3 << 30}, {"GPU-c", "1", 1 << 30}} {
		if got, ok := m.PinnedMemoryLimit(tt.uuid, tt.index); !ok || got != tt.want {
			t.Errorf("PinnedMemoryLimit(%s, %s) = %d, %v; want %d", tt.uuid, tt.index, got, ok, tt.want)
		}
	}
}

func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
		`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"0":"5Gi"}}}}`,
		`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`,
		`{}`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeConfig(raw)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded config fails Validate: %v", err)
		}
		if c.APIVersion != ConfigAPIVersion || (c.Kind != KindGpuConfig && c.Kind != KindMigDeviceConfig) {
			t.Fatalf("accepted %q/%q", c.APIVersion, c.Kind)
		}
	})
}
