package sim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestBuiltinProfiles(t *testing.T) {
	tests := []struct {
		profile  string
		name     string
		arch     gpu.Architecture
		memMiB   uint64
		nvlinks  int
		firstBus string
		driver   string
		cuda     gpu.CUDAVersion
	}{
		{"dgxa100", "NVIDIA A100-SXM4-40GB", gpu.ArchAmpere, 40960, 12, "0000:07:00.0", "550.54.15", 12040},
		{"dgxh100", "NVIDIA H100 80GB HBM3", gpu.ArchHopper, 81920, 18, "0000:18:00.0", "550.54.15", 12040},
		{"dgxh200", "NVIDIA H200 141GB HBM3e", gpu.ArchHopper, 144384, 18, "0000:18:00.0", "550.54.15", 12040},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", gpu.ArchBlackwell, 184320, 18, "0000:1b:00.0", "570.133.20", 12080},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			b, _ := newTestBackend(t, tt.profile)
			if got := b.Name(); got != "sim:"+tt.profile {
				t.Errorf("Name = %q", got)
			}
			sys, err := b.System(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sys.DriverVersion != tt.driver || sys.CUDADriverVersion != tt.cuda || sys.NVMLVersion != "12."+tt.driver || sys.Hostname != "node-a" {
				t.Errorf("System = %+v", sys)
			}
			devs, err := b.Devices(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != 8 {
				t.Fatalf("got %d GPUs, want 8", len(devs))
			}
			uuids, buses := map[string]bool{}, map[string]bool{}
			for i, d := range devs {
				if d.Index != i || d.Minor != i || d.Name != tt.name || d.Architecture != tt.arch || d.MemoryMiB != tt.memMiB {
					t.Errorf("gpu %d = %+v", i, d)
				}
				if want := i / 4; d.NUMANode != want {
					t.Errorf("gpu %d NUMA node = %d, want %d", i, d.NUMANode, want)
				}
				if !d.MIG.Capable || d.MIG.Current || d.MIG.Pending {
					t.Errorf("gpu %d MIG = %+v", i, d.MIG)
				}
				if !strings.HasPrefix(d.UUID, "GPU-") || uuids[d.UUID] {
					t.Errorf("gpu %d UUID %q not a distinct GPU- UUID", i, d.UUID)
				}
				if buses[d.PCIBusID] {
					t.Errorf("gpu %d bus ID %s repeated", i, d.PCIBusID)
				}
				uuids[d.UUID], buses[d.PCIBusID] = true, true
			}
			if devs[0].PCIBusID != tt.firstBus {
				t.Errorf("gpu 0 bus ID = %s, want %s", devs[0].PCIBusID, tt.firstBus)
			}
			top, err := b.Topology(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				for j := range 8 {
					l, ok := top.Between(i, j)
					if i == j {
						continue
					}
					wantPCIe := gpu.PCIeSystem
					if i/4 == j/4 {
						wantPCIe = gpu.PCIeNode
						if tt.profile == "dgxa100" && i/2 == j/2 {
							wantPCIe = gpu.PCIeMultiple
						}
					}
					if !ok || l.NVLinks != tt.nvlinks || l.PCIe != wantPCIe {
						t.Errorf("link %d-%d = %+v (known %v), want NV%d over %s", i, j, l, ok, tt.nvlinks, wantPCIe)
					}
				}
			}
		})
	}
}

func TestStableUUIDs(t *testing.T) {
	ctx := context.Background()
	uuids := func(node string) []string {
		p, err := Load("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(p, Options{NodeName: node})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		devs, err := b.Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range devs {
			out = append(out, d.UUID)
		}
		return out
	}
	first, again, other := uuids("node-a"), uuids("node-a"), uuids("node-b")
	for i := range first {
		if first[i] != again[i] {
			t.Errorf("gpu %d: UUID %s after restart, was %s", i, again[i], first[i])
		}
		if first[i] == other[i] {
			t.Errorf("gpu %d: nodes node-a and node-b share UUID %s", i, first[i])
		}
		if first[i] != GPUUUID("node-a", i) {
			t.Errorf("gpu %d: UUID %s, GPUUUID says %s", i, first[i], GPUUUID("node-a", i))
		}
	}
}

func TestLoadUnknownProfile(t *testing.T) {
	tests := []struct {
		name string
		arg  string
		want []string
	}{
		{"unknown name", "dgx-h9000", append([]string{`"dgx-h9000"`}, BuiltinNames()...)},
		{"missing file", "/nonexistent/node.yaml", []string{"no such file", "dgxh100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.arg)
			if !errors.Is(err, ErrUnknownProfile) {
				t.Fatalf("Load = %v, want ErrUnknownProfile", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestProfileValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *Profile)
		want   string
	}{
		{"no GPUs", func(p *Profile) { p.GPUs, p.Links = nil, nil }, "no GPUs"},
		{"no memory", func(p *Profile) { p.GPUs[2].MemoryMiB = 0 }, "gpu 2: memory"},
		{"bad power", func(p *Profile) { p.GPUs[1].TDPWatts = 10 }, "gpu 1: TDP"},
		{"duplicate bus", func(p *Profile) { p.GPUs[3].PCIBusID = p.GPUs[0].PCIBusID }, "share PCI bus ID"},
		{"unknown MIG table", func(p *Profile) { p.GPUs[0].MIGTable = "X100" }, "unknown MIG table"},
		{"asymmetric link", func(p *Profile) { p.Links[0][1].NVLinks = 2 }, "link 0-1"},
		{"switch across CPUs", func(p *Profile) { p.Links[0][7].PCIe, p.Links[7][0].PCIe = gpu.PCIeSingle, gpu.PCIeSingle }, "gpus 0 and 7: on NUMA nodes 0 and 1"},
		{"short links", func(p *Profile) { p.Links = p.Links[:3] }, "links has 3 rows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Builtin("dgxh100")
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(p)
			_, err = New(p, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestProfileIsCopied(t *testing.T) {
	p, err := Builtin("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p.GPUs[0].Name = "changed"
	p.Links[0][1].NVLinks = 1
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	top, _ := b.Topology(context.Background())
	if l, _ := top.Between(0, 1); devs[0].Name == "changed" || l.NVLinks != 18 {
		t.Errorf("backend follows changes to the caller's profile: name %q, link %v", devs[0].Name, l)
	}
	if b.NodeName() != DefaultNodeName {
		t.Errorf("NodeName = %q, want %q", b.NodeName(), DefaultNodeName)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if !errors.Is(b.Close(), nil) || b.Close() != nil {
		t.Error("Close twice failed")
	}
}

// TestCloudProfiles checks the built-in rented servers: each starts, with
// the GPU names NVML reports, and the NVLink it has or has not.
func TestCloudProfiles(t *testing.T) {
	tests := []struct {
		profile string
		gpus    int
		name    string
		nvlink  bool
		mig     bool
	}{
		{"4xt4", 4, "Tesla T4", false, false},
		{"8xv100", 8, "Tesla V100-SXM2-32GB", true, false},
		{"4xa10g", 4, "NVIDIA A10G", false, false},
		{"8xl4", 8, "NVIDIA L4", false, false},
		{"8xl40s", 8, "NVIDIA L40S", false, false},
		{"8xa100-80gb", 8, "NVIDIA A100-SXM4-80GB", true, true},
		{"8xh100-pcie", 8, "NVIDIA H100 PCIe", false, true},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			if !slices.Contains(BuiltinNames(), tt.profile) {
				t.Errorf("BuiltinNames %v lacks %s", BuiltinNames(), tt.profile)
			}
			b, _ := newTestBackend(t, tt.profile)
			devs, err := b.Devices(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != tt.gpus {
				t.Fatalf("got %d GPUs, want %d", len(devs), tt.gpus)
			}
			for _, d := range devs {
				if d.Name != tt.name || d.MIG.Capable != tt.mig || d.ReservedMiB == 0 {
					t.Errorf("gpu %d = %q MIG-capable %v reserved %d MiB, want %q MIG-capable %v and a driver reservation", d.Index, d.Name, d.MIG.Capable, d.ReservedMiB, tt.name, tt.mig)
				}
			}
			topo, err := b.Topology(ctx)
			if err != nil {
				t.Fatal(err)
			}
			l, _ := topo.Between(0, 1)
			if got := l.NVLinks > 0; got != tt.nvlink {
				t.Errorf("GPUs 0 and 1: %d NVLinks, want NVLink %v", l.NVLinks, tt.nvlink)
			}
		})
	}
}
