package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func parseString(t *testing.T, src string) (*Profile, error) {
	t.Helper()
	return Parse(strings.NewReader(src), "node.yaml")
}

func TestParseT4Pair(t *testing.T) {
	p, err := parseString(t, "gpus:\n  - model: T4\n    count: 2\ntopology:\n  pcie: PHB\n")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(p, Options{NodeName: "t4-node"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "sim:node" || len(devs) != 2 {
		t.Fatalf("%s has %d GPUs", b.Name(), len(devs))
	}
	for _, d := range devs {
		if d.Name != "Tesla T4" || d.Brand != "Tesla" || d.Architecture != gpu.ArchTuring || d.MemoryMiB != 15360 ||
			d.ComputeCapability != (gpu.ComputeCapability{Major: 7, Minor: 5}) || d.MIG.Capable || d.NUMANode != 0 {
			t.Errorf("gpu %d = %+v", d.Index, d)
		}
	}
	top, _ := b.Topology(ctx)
	if l, ok := top.Between(0, 1); !ok || l != (gpu.Link{PCIe: gpu.PCIeHostBridge}) {
		t.Errorf("link = %v", l)
	}
	sys, _ := b.System(ctx)
	if sys.DriverVersion != defaultDriver || sys.CUDADriverVersion != defaultCUDA {
		t.Errorf("system = %+v", sys)
	}
}

const mixedNode = `version: v1
name: mixed
driverVersion: "560.35.03"
cudaDriverVersion: 12.6
gpus:
  - model: H100-SXM5-80GB
    count: 2
    numaNodes: [0, 1]
    migEnabled: true
  - model: a30-pcie-24gb
    numaNode: 1
    mig: none
  - name: NVIDIA RTX 6000 Ada Generation
    memoryMiB: 49140
    architecture: ada
    computeCapability: 8.9
    numaNode: 1
    pciBusIDs: ["0000:C1:00.0"]
    idleWatts: 20
    tdpWatts: 300
topology:
  pairs:
    - gpus: [0, 1]
      nvlink: 18
    - gpus: [3, 2]
      pcie: PIX
`

func TestParseMixedNode(t *testing.T) {
	p, err := parseString(t, mixedNode)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "mixed" || p.DriverVersion != "560.35.03" || p.NVMLVersion != "12.560.35.03" || p.CUDADriverVersion != 12060 {
		t.Errorf("profile = %s %s %s %d", p.Name, p.DriverVersion, p.NVMLVersion, p.CUDADriverVersion)
	}
	b, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	devs, _ := b.Devices(ctx)
	tests := []struct {
		name    string
		numa    int
		mig     gpu.MIGMode
		arch    gpu.Architecture
		bus     string
		product string
	}{
		{"h100 a", 0, gpu.MIGMode{Capable: true, Current: true, Pending: true}, gpu.ArchHopper, "", "NVIDIA H100 80GB HBM3"},
		{"h100 b", 1, gpu.MIGMode{Capable: true, Current: true, Pending: true}, gpu.ArchHopper, "", "NVIDIA H100 80GB HBM3"},
		{"a30 without MIG", 1, gpu.MIGMode{}, gpu.ArchAmpere, "", "NVIDIA A30-PCIE-24GB"},
		{"custom", 1, gpu.MIGMode{}, gpu.ArchAda, "0000:c1:00.0", "NVIDIA RTX 6000 Ada Generation"},
	}
	if len(devs) != len(tests) {
		t.Fatalf("%d GPUs", len(devs))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := devs[i]
			if d.NUMANode != tt.numa || d.MIG != tt.mig || d.Architecture != tt.arch || d.Name != tt.product || tt.bus != "" && d.PCIBusID != tt.bus {
				t.Errorf("gpu %d = %+v", i, d)
			}
		})
	}
	top, _ := b.Topology(ctx)
	links := []struct {
		i, j int
		want string
	}{{0, 1, "NV18"}, {0, 2, "SYS"}, {1, 2, "NODE"}, {2, 3, "PIX"}, {1, 3, "NODE"}, {0, 3, "SYS"}}
	for _, l := range links {
		if got, _ := top.Between(l.i, l.j); got.String() != l.want {
			t.Errorf("link %d-%d = %s, want %s", l.i, l.j, got, l.want)
		}
	}
	if s := sample(t, b, 3); s.PowerMilliW != 20000 {
		t.Errorf("custom GPU idles at %d mW, want the file's 20 W", s.PowerMilliW)
	}
}

func TestParseMIGTableAndNVLink(t *testing.T) {
	p, err := parseString(t, "gpus:\n  - model: L4\n    count: 4\n    mig: H100-80gb\ntopology:\n  nvlink: 4\n")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	profs, err := b.MIGProfiles(context.Background(), 2)
	if err != nil || len(profs) == 0 {
		t.Fatalf("MIG profiles of an L4 given the H100 table: %v, %v", profs, err)
	}
	h100, _ := newTestBackend(t, "dgxh100")
	want, _ := h100.MIGProfiles(context.Background(), 0)
	for i := range want {
		if i >= len(profs) || profs[i].Name != want[i].Name || len(profs[i].Placements) != len(want[i].Placements) {
			t.Errorf("profile %d = %+v, want the H100's %+v", i, profs[i], want[i])
		}
	}
	top, _ := b.Topology(context.Background())
	for i := range 4 {
		for j := range 4 {
			if l, _ := top.Between(i, j); i != j && l.NVLinks != 4 {
				t.Errorf("link %d-%d = %v", i, j, l)
			}
		}
	}
}

func TestParseMIGDevices(t *testing.T) {
	tests := []struct {
		name    string
		devices string
		want    []string
		wantErr string
	}{
		{"seven small", "[1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]", []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, ""},
		{"mixed sizes", "[3g.40gb, 2g.20gb, 1g.10gb]", []string{"3g.40gb", "2g.20gb", "1g.10gb"}, ""},
		{"more than fits", "[7g.80gb, 1g.10gb]", nil, "gpu 0: MIG device 1g.10gb"},
		{"unknown profile", "[9g.90gb]", nil, "gpu 0: MIG device 9g.90gb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := parseString(t, "gpus:\n  - model: H100-SXM5-80GB\n    migEnabled: true\n    migDevices: "+tt.devices+"\n  - model: H100-SXM5-80GB\n")
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(p, Options{NodeName: "n"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			devs, err := b.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range devs[0].MIGDevices {
				got = append(got, m.Profile)
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("gpu 0 MIG devices = %v, want %v", got, want)
			}
			if len(devs[1].MIGDevices) != 0 || devs[1].MIG.Current {
				t.Errorf("gpu 1 = %+v, want MIG off", devs[1])
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"empty", "", []string{"node.yaml", "empty"}},
		{"syntax", "gpus: [\n", []string{"node.yaml", "line"}},
		{"unknown top-level field", "version: v1\ngpu:\n  - model: T4\n", []string{"node.yaml", "line 2", "gpu: unknown field", "allowed: version, name, driverVersion"}},
		{"unknown GPU field", "gpus:\n  - model: T4\n    memory: 100\n", []string{"line 3", "gpus[0].memory", "memoryMiB"}},
		{"wrong type", "gpus:\n  - model: T4\n    memoryMiB: lots\n", []string{"line 3", "gpus[0].memoryMiB", "non-negative integer", `"lots"`}},
		{"gpus not a list", "gpus:\n  model: T4\n", []string{"line 2", "gpus", "want a list"}},
		{"no gpus", "name: x\n", []string{"gpus", "at least one"}},
		{"bad version", "version: v2\ngpus: [{model: T4}]\n", []string{"line 1", "want v1"}},
		{"zero count", "gpus:\n  - model: T4\n    count: 0\n", []string{"line 3", "gpus[0].count", "1 or more"}},
		{"too many", "gpus:\n  - model: T4\n    count: 65\n", []string{"gpus[0].count", "at most 64"}},
		{"unknown model", "gpus:\n  - model: T5\n", []string{"line 2", "gpus[0].model", `"T5"`, "T4", "H100-SXM5-80GB"}},
		{"model-less GPU needs fields", "gpus:\n  - name: X\n", []string{"line 2", "gpus[0]", "memoryMiB, architecture, computeCapability"}},
		{"unknown MIG table", "gpus:\n  - model: T4\n    mig: T4-16GB\n", []string{"line 3", "gpus[0].mig", "none", "H100-80GB"}},
		{"MIG on non-MIG GPU", "gpus:\n  - model: T4\n    migEnabled: true\n", []string{"line 3", "migEnabled", "not MIG-capable"}},
		{"MIG devices with MIG off", "gpus:\n  - model: H100-SXM5-80GB\n    migDevices: [1g.10gb]\n", []string{"line 3", "gpus[0].migDevices", "migEnabled: true"}},
		{"bad architecture", "gpus:\n  - model: T4\n    architecture: fermi\n", []string{"line 3", "gpus[0].architecture", "hopper"}},
		{"bad compute capability", "gpus:\n  - model: T4\n    computeCapability: seven\n", []string{"line 3", "computeCapability", `"8.0"`}},
		{"bad power", "gpus:\n  - model: T4\n    tdpWatts: 5\n", []string{"line 2", "tdpWatts", "idleWatts"}},
		{"numa both ways", "gpus:\n  - model: T4\n    count: 2\n    numaNode: 0\n    numaNodes: [0, 1]\n", []string{"line 5", "numaNodes", "not both"}},
		{"numa count", "gpus:\n  - model: T4\n    count: 2\n    numaNodes: [0]\n", []string{"line 4", "one NUMA node per GPU"}},
		{"bad bus ID", "gpus:\n  - model: T4\n    pciBusIDs: [\"07:00.0\"]\n", []string{"line 3", "pciBusIDs[0]", "0000:18:00.0"}},
		{"duplicate bus ID", "gpus:\n  - model: T4\n    count: 2\n    pciBusIDs: [0000:07:00.0, 0000:07:00.0]\n", []string{"share PCI bus ID"}},
		{"bad PCIe level", "gpus: [{model: T4}]\ntopology:\n  pcie: FAR\n", []string{"line 3", "topology.pcie", "PIX"}},
		{"bad pair", "gpus: [{model: T4, count: 2}]\ntopology:\n  pairs:\n    - gpus: [0, 2]\n", []string{"line 4", "topology.pairs[0].gpus", "from 0 to 1"}},
		{"pair twice", "gpus: [{model: T4, count: 2}]\ntopology:\n  pairs:\n    - gpus: [0, 1]\n    - gpus: [1, 0]\n", []string{"line 5", "already described"}},
		{"PCIe switch across CPUs", "gpus: [{model: T4, count: 2, numaNodes: [0, 1]}]\ntopology:\n  pairs:\n    - gpus: [0, 1]\n      pcie: PIX\n", []string{"line 4", "topology.pairs[0]", "NUMA nodes 0 and 1", "SYS"}},
		{"default level across CPUs", "gpus: [{model: T4, count: 2, numaNodes: [0, 1]}]\ntopology:\n  pcie: PHB\n", []string{"line 3", "topology.pcie", "gpus 0 and 1"}},
		{"negative nvlink", "gpus: [{model: T4}]\ntopology:\n  nvlink: -1\n", []string{"line 3", "topology.nvlink"}},
		{"field twice", "gpus: [{model: T4}]\nname: a\nname: b\n", []string{"line 3", "name"}},
		{"two documents", "gpus: [{model: T4}]\n---\ngpus: [{model: T4}]\n", []string{"line 2", "one YAML document"}},
		{"bad cuda", "cudaDriverVersion: twelve\ngpus: [{model: T4}]\n", []string{"line 1", "cudaDriverVersion"}},
		{"mapping for scalar", "name: {a: b}\ngpus: [{model: T4}]\n", []string{"line 1", "name", "want a string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseString(t, tt.src)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "two-t4.yaml")
	if err := os.WriteFile(path, []byte("gpus: [{model: T4, count: 2}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("gpus:\n  - gpuModel: T4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil || p.Name != "two-t4" || len(p.GPUs) != 2 {
		t.Fatalf("Load = %+v, %v", p, err)
	}
	_, err = Load(bad)
	if errors.Is(err, ErrUnknownProfile) {
		t.Errorf("a malformed file is reported as an unknown profile: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "gpus[0].gpuModel") {
		t.Errorf("Load(bad) = %v", err)
	}
	for _, f := range []struct {
		path string
		gpus int
	}{{"testdata/two-t4.yaml", 2}, {"testdata/mixed.yaml", 4}} {
		if p, err := Load(f.path); err != nil || len(p.GPUs) != f.gpus {
			t.Errorf("Load(%s) = %v", f.path, err)
		}
	}
	p, err = Load("DGXH100")
	if err != nil || p.Name != "dgxh100" {
		t.Errorf("Load(DGXH100) = %v", err)
	}
}
