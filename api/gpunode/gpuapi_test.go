package gpunode

import (
	"strings"
	"testing"
)

func TestParseGPUAPI(t *testing.T) {
	tests := []struct {
		name, in string
		want     GPUAPI
		dp, dra  bool
		wantErr  bool
	}{
		{name: "dra", in: "dra", want: GPUAPIDRA, dra: true},
		{name: "device plugin", in: "device-plugin", want: GPUAPIDevicePlugin, dp: true},
		{name: "both", in: "both", want: GPUAPIBoth, dp: true, dra: true},
		{name: "spaces", in: " dra ", want: GPUAPIDRA, dra: true},
		{name: "case matters", in: "DRA", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "too long", in: strings.Repeat("d", 64), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGPUAPI(tt.in)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), LabelGPUAPI) {
					t.Fatalf("ParseGPUAPI(%q) = %q, %v; want an error naming the label", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want || got.DevicePlugin() != tt.dp || got.DRA() != tt.dra {
				t.Errorf("ParseGPUAPI(%q) = %q (dp %v, dra %v), %v", tt.in, got, got.DevicePlugin(), got.DRA(), err)
			}
		})
	}
}
