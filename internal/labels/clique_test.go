package labels

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

func TestCliqueLabeler(t *testing.T) {
	const a, b = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31", "0c3e2a1f-5b44-4f8e-9d71-2a6b8c0e9f13"
	done := func(cluster string, clique uint32) gpu.Fabric {
		return gpu.Fabric{ClusterUUID: cluster, CliqueID: clique, State: gpu.FabricCompleted}
	}
	tests := []struct {
		name    string
		fabrics []gpu.Fabric
		want    string // "" for no label
	}{
		{name: "backend without fabric info"},
		{name: "GPUs without a fabric", fabrics: []gpu.Fabric{{}, {}, {}, {}}},
		{name: "one rack", fabrics: []gpu.Fabric{done(a, 1), done(a, 1), done(a, 1), done(a, 1)}, want: a + ".1"},
		{name: "large clique ID", fabrics: []gpu.Fabric{done(b, 32766), done(b, 32766)}, want: b + ".32766"},
		{name: "one GPU still registering", fabrics: []gpu.Fabric{done(a, 2), {State: gpu.FabricInProgress}, done(a, 2)}, want: a + ".2"},
		{name: "all registering", fabrics: []gpu.Fabric{{State: gpu.FabricInProgress}, {State: gpu.FabricNotStarted}}},
		{name: "registration failed", fabrics: []gpu.Fabric{{ClusterUUID: a, CliqueID: 1, State: gpu.FabricCompleted, Status: errors.New("fabric registration failed")}}},
		{name: "zero cluster UUID", fabrics: []gpu.Fabric{done("", 1), done("", 1)}},
		{name: "clusters disagree", fabrics: []gpu.Fabric{done(a, 1), done(b, 1)}},
		{name: "cliques disagree", fabrics: []gpu.Fabric{done(a, 1), done(a, 1), done(a, 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewCliqueLabeler()
			if err != nil {
				t.Fatal(err)
			}
			out := Labels{}
			if err := l.Label(&Input{Fabrics: tt.fabrics}, out); err != nil {
				t.Fatal(err)
			}
			got, ok := out[gpunode.LabelGPUClique]
			if tt.want == "" && ok || got != tt.want {
				t.Errorf("%s = %q (present %v), want %q", gpunode.LabelGPUClique, got, ok, tt.want)
			}
		})
	}
}

// fabricInventory is a simulated node whose fabric info fails with err.
type fabricInventory struct {
	*sim.Backend
	err error
}

func (f fabricInventory) GPUFabric(context.Context, int) (gpu.Fabric, error) {
	return gpu.Fabric{}, f.err
}

func TestReadInputFabrics(t *testing.T) {
	rack := sim.FabricSpec{ClusterUUID: sim.FabricClusterUUID("rack-2"), CliqueID: 4, State: gpu.FabricCompleted}
	tests := []struct {
		name    string
		profile string
		fabric  *sim.FabricSpec
		wrap    error // GPUFabric's error, when set
		want    string
		wantErr string
	}{
		{name: "NVL72 tray", profile: "gb200-nvl72", fabric: &rack, want: rack.String()},
		{name: "GB300 tray of the built-in rack", profile: "gb300-nvl72", want: sim.FabricClusterUUID("gb300-nvl72") + ".1"},
		{name: "tray still registering", profile: "gb300-nvl72", fabric: &sim.FabricSpec{State: gpu.FabricInProgress}},
		{name: "DGX without a fabric", profile: "dgxh100"},
		{name: "driver without the call", profile: "gb200-nvl72", wrap: gpu.ErrNotSupported},
		{name: "fabric info fails", profile: "gb200-nvl72", wrap: gpu.ErrGPULost, wantErr: "NVLink fabric of GPU 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := sim.Builtin(tt.profile)
			if err != nil {
				t.Fatal(err)
			}
			b, err := sim.New(p, sim.Options{NodeName: "tray", Fabric: tt.fabric})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			var inv gpu.Inventory = b
			if tt.wrap != nil {
				inv = fabricInventory{Backend: b, err: tt.wrap}
			}
			in, err := ReadInput(t.Context(), inv, time.Unix(0, 0))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ReadInput error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ls, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			labels, _, err := Compute(ls, in)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := labels[gpunode.LabelGPUClique]; got != tt.want || tt.want == "" && ok {
				t.Errorf("%s = %q (present %v), want %q", gpunode.LabelGPUClique, got, ok, tt.want)
			}
		})
	}
}
