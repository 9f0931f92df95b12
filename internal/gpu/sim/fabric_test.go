package sim

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestNVL72Trays(t *testing.T) {
	tests := []struct {
		profile  string
		name     string
		memMiB   uint64
		cc       gpu.ComputeCapability
		deviceID uint32
		migNames []string
	}{
		{profile: "gb200-nvl72", name: "NVIDIA GB200", memMiB: 189471, cc: gpu.ComputeCapability{Major: 10}, deviceID: 0x294110DE,
			migNames: []string{"1g.23gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "1g.23gb+me", "1g.47gb"}},
		{profile: "gb300-nvl72", name: "NVIDIA GB300", memMiB: 284208, cc: gpu.ComputeCapability{Major: 10, Minor: 3}, deviceID: 0x31C210DE,
			migNames: []string{"1g.35gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb", "1g.35gb+me", "1g.70gb"}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			p, err := Builtin(tt.profile)
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(p, Options{NodeName: "tray-1"})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			devs, err := b.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != NVL72TrayGPUs {
				t.Fatalf("%d GPUs, want %d", len(devs), NVL72TrayGPUs)
			}
			for i, d := range devs {
				if d.Name != tt.name || d.MemoryMiB != tt.memMiB || d.ComputeCapability != tt.cc || d.PCIDeviceID != tt.deviceID ||
					d.Architecture != gpu.ArchBlackwell || d.NUMANode != i/2 || !d.MIG.Capable {
					t.Errorf("gpu %d = %+v", i, d)
				}
			}
			topo, err := b.Topology(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if l, _ := topo.Between(0, 3); l.NVLinks != 18 || l.PCIe != gpu.PCIeSystem {
				t.Errorf("link 0-3 = %v, want NV18 across the two Grace CPUs", l)
			}
			profiles, err := b.MIGProfiles(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, mp := range profiles {
				names = append(names, mp.Name)
			}
			for _, want := range tt.migNames {
				if !slices.Contains(names, want) {
					t.Errorf("MIG profiles %v lack %s", names, want)
				}
			}
			f, err := b.GPUFabric(t.Context(), 3)
			if err != nil {
				t.Fatal(err)
			}
			if !f.Attached() || f.ClusterUUID != FabricClusterUUID(tt.profile) || f.CliqueID != 1 {
				t.Errorf("fabric = %+v, want the profile's registered fabric", f)
			}
		})
	}
}

func TestGPUFabric(t *testing.T) {
	rack := FabricSpec{ClusterUUID: FabricClusterUUID("rack-3"), CliqueID: 7, State: gpu.FabricCompleted}
	tests := []struct {
		name    string
		profile string
		fabric  *FabricSpec
		lose    bool
		want    gpu.Fabric
		wantErr error
		newErr  string
	}{
		{name: "rack given", profile: "gb300-nvl72", fabric: &rack, want: gpu.Fabric{ClusterUUID: rack.ClusterUUID, CliqueID: 7, State: gpu.FabricCompleted}},
		{name: "registering", profile: "gb200-nvl72", fabric: &FabricSpec{State: gpu.FabricInProgress}, want: gpu.Fabric{State: gpu.FabricInProgress}},
		{name: "no fabric", profile: "dgxh100", wantErr: gpu.ErrNotSupported},
		{name: "lost GPU", profile: "gb200-nvl72", lose: true, wantErr: gpu.ErrGPULost},
		{name: "fabric on a DGX", profile: "dgxh100", fabric: &rack, newErr: "no multi-node NVLink fabric"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Builtin(tt.profile)
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(p, Options{Fabric: tt.fabric})
			if tt.newErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.newErr) {
					t.Fatalf("New error = %v, want one mentioning %q", err, tt.newErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			if tt.lose {
				if err := b.LoseGPU(1); err != nil {
					t.Fatal(err)
				}
			}
			got, err := b.GPUFabric(t.Context(), 1)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("GPUFabric error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("GPUFabric = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseFabric(t *testing.T) {
	tests := []struct {
		in      string
		want    FabricSpec
		wantErr string
	}{
		{in: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1", want: FabricSpec{ClusterUUID: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31", CliqueID: 1, State: gpu.FabricCompleted}},
		{in: "7B968A6D-C8AA-45E1-9E07-E1E51BE99C31.32766", want: FabricSpec{ClusterUUID: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31", CliqueID: 32766, State: gpu.FabricCompleted}},
		{in: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31", wantErr: "want CLUSTER_UUID.CLIQUE_ID"},
		{in: "rack-1.1", wantErr: "not a UUID"},
		{in: "00000000-0000-0000-0000-000000000000.1", wantErr: "all zeros"},
		{in: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.-1", wantErr: "clique ID"},
		{in: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.4294967296", wantErr: "clique ID"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseFabric(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseFabric error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseFabric = %+v, %v; want %+v", got, err, tt.want)
			}
			if back, err := ParseFabric(got.String()); err != nil || back != got {
				t.Errorf("round trip of %s = %+v, %v", got, back, err)
			}
		})
	}
}

func TestParseProfileFabric(t *testing.T) {
	const gpus = "name: tray\ngpus: [{model: GB300, count: 4}]\n"
	tests := []struct {
		name    string
		src     string
		want    *FabricSpec
		wantErr string
	}{
		{name: "no fabric", src: gpus},
		{name: "defaults", src: gpus + "fabric: {}\n", want: &FabricSpec{ClusterUUID: FabricClusterUUID("tray"), CliqueID: 1, State: gpu.FabricCompleted}},
		{name: "all fields", src: gpus + "fabric:\n  clusterUUID: 7B968A6D-C8AA-45E1-9E07-E1E51BE99C31\n  cliqueID: 32766\n  state: in-progress\n",
			want: &FabricSpec{ClusterUUID: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31", CliqueID: 32766, State: gpu.FabricInProgress}},
		{name: "bad UUID", src: gpus + "fabric: {clusterUUID: rack-1}\n", wantErr: "line 3: fabric.clusterUUID"},
		{name: "zero UUID", src: gpus + "fabric: {clusterUUID: 00000000-0000-0000-0000-000000000000}\n", wantErr: "fabric.clusterUUID"},
		{name: "negative clique", src: gpus + "fabric: {cliqueID: -1}\n", wantErr: "fabric.cliqueID"},
		{name: "unknown state", src: gpus + "fabric: {state: done}\n", wantErr: "not-started, in-progress, completed"},
		{name: "unknown field", src: gpus + "fabric: {domain: rack-1}\n", wantErr: "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(strings.NewReader(tt.src), "tray.yaml")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == nil && p.Fabric != nil:
				t.Errorf("fabric %+v, want none", *p.Fabric)
			case tt.want != nil && (p.Fabric == nil || *p.Fabric != *tt.want):
				t.Errorf("fabric %v, want %+v", p.Fabric, *tt.want)
			}
		})
	}
}
