package deviceplugin

import (
	"maps"
	"testing"

	"github.com/gpuplane/gpuplane/internal/sharing"
)

func TestFractionEnv(t *testing.T) {
	mps := []*sharing.Device{{Sharing: sharing.SharingMPS, Replicas: 4, MemoryMiB: 81559}}
	ts := []*sharing.Device{{Sharing: sharing.SharingTimeSlicing, Replicas: 4, MemoryMiB: 81559}}
	tests := []struct {
		name       string
		devs       []*sharing.Device
		milli, mem int64
		want       map[string]string
	}{
		{"MPS enforces both", mps, 250, 20000, map[string]string{
			EnvGPUFraction: "0.25", EnvGPUMemoryLimit: "20000", EnvMPSActiveThreadPercent: "25", EnvMPSPinnedMemLimit: "0=20000M"}},
		{"MPS memory beyond the GPU is the GPU's", mps, 0, 1 << 20, map[string]string{
			EnvGPUMemoryLimit: "1048576", EnvMPSPinnedMemLimit: "0=81559M"}},
		{"time-slicing only tells", ts, 333, 0, map[string]string{EnvGPUFraction: "0.333"}},
		{"nothing asked", ts, 0, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fractionEnv(nil, tc.devs, tc.milli, tc.mem)
			if !maps.Equal(got, tc.want) {
				t.Fatalf("env %v, want %v", got, tc.want)
			}
		})
	}
}
