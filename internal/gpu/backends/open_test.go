package backends

import (
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestOpenSimulatedFabric(t *testing.T) {
	const rack = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.5"
	tests := []struct {
		name    string
		opts    Options
		env     string
		want    string
		wantErr string
	}{
		{name: "flag", opts: Options{Simulate: "gb200-nvl72", SimulateFabric: rack}, want: rack},
		{name: "environment", opts: Options{Simulate: "gb300-nvl72"}, env: rack, want: rack},
		{name: "flag over environment", opts: Options{Simulate: "gb300-nvl72", SimulateFabric: rack}, env: "0c3e2a1f-5b44-4f8e-9d71-2a6b8c0e9f13.1", want: rack},
		{name: "malformed", opts: Options{Simulate: "gb200-nvl72", SimulateFabric: "rack-1"}, wantErr: "--simulate-fabric"},
		{name: "profile without a fabric", opts: Options{Simulate: "dgxh100", SimulateFabric: rack}, wantErr: "no multi-node NVLink fabric"},
		{name: "real GPUs", opts: Options{SimulateFabric: rack}, wantErr: "only simulated GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(gpunode.EnvSimulateFabric, tt.env)
			t.Setenv(EnvSimulate, "")
			tt.opts.NodeName = "tray-1"
			b, err := Open(t.Context(), tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			f, err := b.(gpu.FabricReader).GPUFabric(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := gpunode.CliqueValue(f.ClusterUUID, f.CliqueID); got != tt.want || !f.Attached() {
				t.Errorf("fabric %s (attached %v), want %s", got, f.Attached(), tt.want)
			}
		})
	}
}
