package dev

import (
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

func TestParseLayout(t *testing.T) {
	tests := []struct {
		spec    string
		nodes   int
		want    Layout
		wantErr string
	}{
		{spec: "blocks=2,racks=2,rack-nodes=4", nodes: 16, want: Layout{Blocks: 2, RacksPerBlock: 2, RackNodes: 4}},
		{spec: "rack-nodes=4", nodes: 9, want: Layout{Blocks: 1, RacksPerBlock: 3, RackNodes: 4}},
		{spec: "blocks=2, rack-nodes=2", nodes: 7, want: Layout{Blocks: 2, RacksPerBlock: 2, RackNodes: 2}},
		{spec: "nvl72", nodes: 36, want: Layout{Blocks: 1, RacksPerBlock: 2, RackNodes: 18, NVL72: true}},
		{spec: "rack-nodes=4,nvl72,racks=3", nodes: 2, want: Layout{Blocks: 1, RacksPerBlock: 3, RackNodes: 4, NVL72: true}},
		{spec: "racks=2", nodes: 4, wantErr: "rack-nodes: required"},
		{spec: "rack-nodes=0", nodes: 4, wantErr: "rack-nodes: want a whole number >= 1"},
		{spec: "rack-nodes=two", nodes: 4, wantErr: "rack-nodes: want a whole number >= 1"},
		{spec: "blocks", nodes: 4, wantErr: "blocks: want a whole number >= 1"},
		{spec: "rack-nodes=4,rack-nodes=2", nodes: 4, wantErr: "rack-nodes given twice"},
		{spec: "rack-nodes=19,nvl72", nodes: 4, wantErr: "holds 18 compute trays"},
		{spec: "nvl72=yes", nodes: 4, wantErr: "nvl72 takes no value"},
		{spec: "rows=2,rack-nodes=2", nodes: 4, wantErr: `unknown key "rows"`},
		{spec: "blocks=1,racks=2,rack-nodes=2", nodes: 5, wantErr: "hold 4 nodes, but the cluster has 5"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := parseLayout(tt.spec, tt.nodes)
			if tt.wantErr != "" {
				var ue *cliutil.UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want a usage error mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || *got != tt.want {
				t.Fatalf("parseLayout = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestLayoutPlace(t *testing.T) {
	l := &Layout{Blocks: 2, RacksPerBlock: 2, RackNodes: 3, NVL72: true}
	tests := []struct {
		node  int
		block int
		rack  int
	}{{0, 1, 1}, {2, 1, 1}, {3, 1, 2}, {5, 1, 2}, {6, 2, 3}, {11, 2, 4}}
	fabrics := map[int]string{}
	for _, tt := range tests {
		p := l.Place(tt.node)
		if p.Block != tt.block || p.Rack != tt.rack {
			t.Errorf("node %d in block %d rack %d, want block %d rack %d", tt.node, p.Block, p.Rack, tt.block, tt.rack)
		}
		want := map[string]string{
			LabelTopologyBlock:     "block-" + string(rune('0'+tt.block)),
			LabelTopologyRack:      "rack-" + string(rune('0'+tt.rack)),
			gpunode.LabelGPUClique: RackFabric(tt.rack),
		}
		if got := p.Labels(); !maps.Equal(got, want) {
			t.Errorf("node %d labels %v, want %v", tt.node, got, want)
		}
		if f, ok := fabrics[p.Rack]; ok && f != p.Fabric {
			t.Errorf("rack %d has fabrics %s and %s", p.Rack, f, p.Fabric)
		}
		fabrics[p.Rack] = p.Fabric
	}
	seen := map[string]int{}
	for rack, f := range fabrics {
		if other, dup := seen[f]; dup {
			t.Errorf("racks %d and %d share the fabric %s", other, rack, f)
		}
		seen[f] = rack
	}
	if p := (&Layout{Blocks: 1, RacksPerBlock: 1, RackNodes: 4}).Place(2); p.Fabric != "" {
		t.Errorf("a rack outside NVL72 has fabric %s", p.Fabric)
	}
}

func TestResolveLayout(t *testing.T) {
	tests := []struct {
		name    string
		f       upFlags
		wantErr string
	}{
		{name: "trays and kwok trays", f: upFlags{nodes: 2, profile: "gb200-nvl72", nodeProfiles: []string{"gb300-nvl72:time-slicing=2"}, kwokNodes: 3, kwokGPUs: 4, topology: "rack-nodes=4,nvl72"}},
		{name: "racks without NVLink domains take any node", f: upFlags{nodes: 2, profile: "dgxh100", kwokNodes: 2, kwokGPUs: 8, topology: "rack-nodes=2"}},
		{name: "DGX in an NVL72 rack", f: upFlags{nodes: 1, profile: "dgxh100", topology: "nvl72"}, wantErr: "not an NVL72 compute tray"},
		{name: "trays in MIG modes", f: upFlags{nodes: 1, profile: "gb200-nvl72:mig-mixed", nodeProfiles: []string{"gb300-nvl72:mig-dynamic"}, topology: "nvl72"}},
		{name: "eight-GPU kwok trays", f: upFlags{kwokNodes: 2, kwokGPUs: 8, topology: "nvl72"}, wantErr: "--kwok-gpus 8"},
		{name: "too many nodes", f: upFlags{nodes: 1, profile: "gb200-nvl72", kwokNodes: 4, kwokGPUs: 4, topology: "racks=1,rack-nodes=4,nvl72"}, wantErr: "the cluster has 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolveLayout(&tt.f)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ue *cliutil.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want a usage error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// TestChartEnv checks what the node simulator hands the chart's agent pod:
// the profile always, the rack's fabric on an NVL72 tray.
func TestChartEnv(t *testing.T) {
	fabric := RackFabric(3)
	tests := []struct {
		name string
		n    NodeSpec
		want []string
	}{
		{name: "DGX", n: NodeSpec{SimProfile: "dgxh100"}, want: []string{gpunode.EnvSimulate + "=dgxh100"}},
		{name: "NVL72 tray", n: NodeSpec{SimProfile: "gb200-nvl72", Fabric: fabric},
			want: []string{gpunode.EnvSimulate + "=gb200-nvl72", gpunode.EnvSimulateFabric + "=" + fabric}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chartEnv(tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("chartEnv = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMIGModesKeepTheFabric prepares NVL72 trays in the MIG modes, whose
// profile files are written from the built-in tray: the GPUs must still
// report the tray's NVLink fabric, so that --simulate-fabric can put them
// in their rack.
func TestMIGModesKeepTheFabric(t *testing.T) {
	tests := []struct {
		arg           string
		wantResources []string
	}{
		{arg: "gb200-nvl72:mig-mixed", wantResources: []string{"nvidia.com/gpu", "nvidia.com/mig-1g.23gb", "nvidia.com/mig-3g.93gb"}},
		{arg: "gb300-nvl72:mig-mixed", wantResources: []string{"nvidia.com/gpu", "nvidia.com/mig-1g.35gb", "nvidia.com/mig-3g.139gb"}},
		{arg: "gb200-nvl72:mig-dynamic", wantResources: []string{"nvidia.com/gpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			n, err := prepareNode(t.Context(), "tray", tt.arg, filepath.Join(t.TempDir(), "tray"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(n.Resources, tt.wantResources) {
				t.Errorf("resources %v, want %v", n.Resources, tt.wantResources)
			}
			builtin, err := sim.Builtin(strings.Split(tt.arg, ":")[0])
			if err != nil {
				t.Fatal(err)
			}
			p, err := sim.Load(n.SimProfile)
			if err != nil {
				t.Fatal(err)
			}
			if p.Fabric == nil || *p.Fabric != *builtin.Fabric {
				t.Fatalf("profile %s has fabric %v, want the tray's %+v", n.SimProfile, p.Fabric, *builtin.Fabric)
			}
			b, err := sim.New(p, sim.Options{Fabric: &sim.FabricSpec{ClusterUUID: sim.FabricClusterUUID("rack-9"), CliqueID: 1, State: gpu.FabricCompleted}})
			if err != nil {
				t.Fatalf("the tray does not take its rack's fabric: %v", err)
			}
			_ = b.Close()
		})
	}
}
