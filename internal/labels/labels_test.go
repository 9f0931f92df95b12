package labels

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func render(labels, annotations Labels) string {
	var b strings.Builder
	for _, k := range labels.Keys() {
		b.WriteString(k + "=" + labels[k] + "\n")
	}
	b.WriteString("# annotations\n")
	for _, k := range annotations.Keys() {
		b.WriteString(k + "=" + annotations[k] + "\n")
	}
	return b.String()
}

// golden compares got with testdata/<name>.golden, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("labels differ from %s (run with -update if the change is intended):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// sysfs makes a sysfs tree with the machine name and every GPU's PCI
// class.
func sysfs(t *testing.T, n *node, class string) (machineFile, root string) {
	t.Helper()
	root = t.TempDir()
	machineFile = filepath.Join(root, "class", "dmi", "id", "product_name")
	if err := os.MkdirAll(filepath.Dir(machineFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(machineFile, []byte("DGX H100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range n.in.Devices {
		dir := filepath.Join(root, "bus", "pci", "devices", strings.ToLower(d.PCIBusID[4:]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "class"), []byte(class+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return machineFile, root
}

func TestGolden(t *testing.T) {
	shared := func(strategy string, replicas int, renamed bool) map[string]Sharing {
		return map[string]Sharing{ResourceGPU: {Strategy: strategy, Replicas: replicas, Renamed: renamed}}
	}
	tests := []struct {
		name  string
		node  *node
		cfg   Config
		class string
	}{
		{name: "dgxh100-exclusive", node: dgxH100(), class: "0x030200"},
		{name: "dgxh100-time-slicing", node: dgxH100(), cfg: Config{Sharing: shared(SharingTimeSlicing, 10, false)}, class: "0x030200"},
		{name: "dgxh100-time-slicing-renamed", node: dgxH100(), cfg: Config{Sharing: shared(SharingTimeSlicing, 4, true)}, class: "0x030200"},
		{name: "dgxh100-mps", node: dgxH100(), cfg: Config{Sharing: shared(SharingMPS, 2, false)}, class: "0x030200"},
		{name: "dgxh100-timestamp", node: dgxH100(), cfg: Config{Timestamp: true}, class: "0x030200"},
		{name: "dgxh100-unknown-mode", node: dgxH100(), class: ""},
		{name: "graphics", node: newNode("NVIDIA RTX A6000", "ampere", dgxA100().in.Devices[0].ComputeCapability, 49140, 2, 0), class: "0x030000"},
		{
			name: "dgxa100-mig-single",
			node: dgxA100().mig(0, "1g.5gb", 7).mig(1, "1g.5gb", 7).mig(2, "1g.5gb", 7).mig(3, "1g.5gb", 7).
				mig(4, "1g.5gb", 7).mig(5, "1g.5gb", 7).mig(6, "1g.5gb", 7).mig(7, "1g.5gb", 7),
			cfg:   Config{MIGStrategy: MIGStrategySingle},
			class: "0x030200",
		},
		{
			name: "dgxa100-mig-single-shared",
			node: dgxA100().mig(0, "3g.20gb", 2).mig(1, "3g.20gb", 2).mig(2, "3g.20gb", 2).mig(3, "3g.20gb", 2).
				mig(4, "3g.20gb", 2).mig(5, "3g.20gb", 2).mig(6, "3g.20gb", 2).mig(7, "3g.20gb", 2),
			cfg:   Config{MIGStrategy: MIGStrategySingle, Sharing: shared(SharingTimeSlicing, 2, false)},
			class: "0x030200",
		},
		{name: "dgxa100-mig-single-invalid", node: dgxA100().mig(0, "1g.5gb", 7).mig(1, "2g.10gb", 3), cfg: Config{MIGStrategy: MIGStrategySingle}, class: "0x030200"},
		{name: "dgxa100-mig-single-disabled", node: dgxA100(), cfg: Config{MIGStrategy: MIGStrategySingle}, class: "0x030200"},
		{
			name: "dgxa100-mig-mixed",
			node: dgxA100().mig(0, "1g.5gb", 7).mig(1, "2g.10gb", 3).mig(2, "3g.20gb", 2).mig(3, "7g.40gb", 1),
			cfg: Config{MIGStrategy: MIGStrategyMixed, Sharing: map[string]Sharing{
				"nvidia.com/mig-1g.5gb": {Strategy: SharingTimeSlicing, Replicas: 4},
			}},
			class: "0x030200",
		},
		{name: "no-gpus", node: &node{in: &Input{}}, class: "0x030200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if tt.class != "" {
				cfg.MachineTypeFile, cfg.SysfsRoot = sysfs(t, tt.node, tt.class)
			} else {
				cfg.MachineTypeFile, cfg.SysfsRoot = filepath.Join(t.TempDir(), "absent"), t.TempDir()
			}
			ls, err := New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			in := tt.node.in
			in.Now = time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
			labels, annotations, err := Compute(ls, in)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			for k, v := range labels {
				if v != sanitizeValue(v) || len(v) > 63 {
					t.Errorf("label %s=%q is not a valid label value", k, v)
				}
			}
			golden(t, tt.name, render(labels, annotations))
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "empty is valid", cfg: Config{}},
		{name: "bad mig strategy", cfg: Config{MIGStrategy: "both"}, wantErr: "migStrategy: must be none, single or mixed"},
		{name: "bad sharing strategy", cfg: Config{Sharing: map[string]Sharing{ResourceGPU: {Strategy: "slices", Replicas: 2}}}, wantErr: "sharing[nvidia.com/gpu].strategy"},
		{name: "zero replicas", cfg: Config{Sharing: map[string]Sharing{ResourceGPU: {Strategy: SharingMPS}}}, wantErr: "sharing[nvidia.com/gpu].replicas: must be >= 1 and at most 1000, got 0"},
		{name: "replicas without sharing", cfg: Config{Sharing: map[string]Sharing{ResourceGPU: {Strategy: SharingNone, Replicas: 3}}}, wantErr: "must be 1 when strategy is none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
			if _, err := New(tt.cfg); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestSplitDriverVersion(t *testing.T) {
	tests := []struct {
		name, in, major, minor, rev string
		wantErr                     bool
	}{
		{name: "three parts", in: "550.54.15", major: "550", minor: "54", rev: "15"},
		{name: "two parts", in: "535.104", major: "535", minor: "104"},
		{name: "one part", in: "550", wantErr: true},
		{name: "not a number", in: "550.x.1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			major, minor, rev, err := splitDriverVersion(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if major != tt.major || minor != tt.minor || rev != tt.rev {
				t.Fatalf("got %q %q %q, want %q %q %q", major, minor, rev, tt.major, tt.minor, tt.rev)
			}
		})
	}
}

func TestTopology(t *testing.T) {
	chain := newNode("NVIDIA A10", "ampere", dgxA100().in.Devices[0].ComputeCapability, 24000, 4, 0)
	chain.in.Topology.Set(0, 1, chainLink(4))
	chain.in.Topology.Set(1, 2, chainLink(2))
	reserving := dgxH100().in
	reserving.Devices[1].ReservedMiB = 509
	tests := []struct {
		name         string
		in           *Input
		wantGroups   []gpunode.NVLinkGroup
		wantReserved []int64
	}{
		{name: "all to all", in: dgxH100().in, wantGroups: []gpunode.NVLinkGroup{{GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, NVLinks: 18}}},
		{name: "driver reservations", in: reserving, wantGroups: []gpunode.NVLinkGroup{{GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, NVLinks: 18}}, wantReserved: []int64{0, 509}},
		{name: "no nvlink", in: newNode("NVIDIA L4", "ada-lovelace", dgxH100().in.Devices[0].ComputeCapability, 23034, 4, 0).in, wantGroups: []gpunode.NVLinkGroup{}},
		// 0-1-2 are linked as a chain, so 0 and 2 share no direct link; 3
		// has no NVLink.
		{name: "chain", in: chain.in, wantGroups: []gpunode.NVLinkGroup{{GPUs: []int{0, 1, 2}, NVLinks: 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Labels{}
			l, _ := NewTopologyLabeler()
			if err := l.Annotate(tt.in, out); err != nil {
				t.Fatal(err)
			}
			got, err := gpunode.ParseTopology(out[gpunode.TopologyAnnotation])
			if err != nil {
				t.Fatalf("ParseTopology(%q): %v", out[gpunode.TopologyAnnotation], err)
			}
			if got.GPUs != len(tt.in.Devices) || len(got.NUMA) != len(tt.in.Devices) {
				t.Errorf("gpus %d numa %v, want %d GPUs", got.GPUs, got.NUMA, len(tt.in.Devices))
			}
			if !slices.Equal(got.ReservedMiB, tt.wantReserved) {
				t.Errorf("reservedMiB = %v, want %v", got.ReservedMiB, tt.wantReserved)
			}
			if len(got.Groups) != len(tt.wantGroups) {
				t.Fatalf("groups = %+v, want %+v", got.Groups, tt.wantGroups)
			}
			for i := range got.Groups {
				if !slicesEqual(got.Groups[i].GPUs, tt.wantGroups[i].GPUs) || got.Groups[i].NVLinks != tt.wantGroups[i].NVLinks {
					t.Errorf("group %d = %+v, want %+v", i, got.Groups[i], tt.wantGroups[i])
				}
			}
		})
	}
}

// TestReadKeysWritten checks that the keys other parts read are ones the
// labelers write.
func TestReadKeysWritten(t *testing.T) {
	cfg := Config{Sharing: map[string]Sharing{ResourceGPU: {Strategy: SharingTimeSlicing, Replicas: 4}}}
	n := dgxH100()
	cfg.MachineTypeFile, cfg.SysfsRoot = sysfs(t, n, "0x030200")
	ls, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Compute(ls, n.in)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{gpunode.LabelGPUProduct, gpunode.LabelGPUMemory, gpunode.LabelGPUCount, gpunode.LabelGPUReplicas, gpunode.LabelGPUSharingStrategy, gpunode.LabelMIGStrategy} {
		if _, ok := got[k]; !ok {
			t.Errorf("no labeler writes %s", k)
		}
	}
}
