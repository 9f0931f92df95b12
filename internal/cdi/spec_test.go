package cdi

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

func gpus(n int, migOn ...int) []gpu.Device {
	var out []gpu.Device
	for i := range n {
		g := gpu.Device{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%08d-aaaa", i), Name: "NVIDIA H100", MemoryMiB: 81559, NUMANode: 0}
		for _, m := range migOn {
			if m == i {
				g.MIG.Current = true
				g.MIGDevices = []gpu.MIGDevice{
					{UUID: fmt.Sprintf("MIG-%08d-0001", i), ParentIndex: i, Profile: "1g.10gb", GPUInstanceID: 9},
					{UUID: fmt.Sprintf("MIG-%08d-0002", i), ParentIndex: i, Profile: "3g.40gb", GPUInstanceID: 2},
				}
			}
		}
		out = append(out, g)
	}
	return out
}

func build(t *testing.T, config string, devs []gpu.Device) []*sharing.Resource {
	t.Helper()
	cfg, err := configv1.Load(strings.NewReader(config), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sharing.Build(cfg, devs)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestWriteValidSpecs(t *testing.T) {
	tests := []struct {
		name   string
		config string
		devs   []gpu.Device
	}{
		{"whole GPUs", "version: v1\n", gpus(8)},
		{"time-slicing", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n", gpus(2)},
		{"MPS", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", gpus(2)},
		{"MIG mixed", "version: v1\nflags:\n  migStrategy: mixed\n", gpus(3, 1, 2)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(Options{Dir: dir, DevRoot: "/run/nvidia/driver", MPSRoot: "/run/nvidia/mps"})
			if err != nil {
				t.Fatal(err)
			}
			rs := build(t, tc.config, tc.devs)
			for _, r := range rs {
				if _, err := w.Write(r); err != nil {
					t.Fatalf("%s: %v", r.Name, err)
				}
			}
			// The runtime's view: a CDI cache over the directory resolves
			// every allocated device by both ID strategies, with no conflicts.
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if errs := cache.GetErrors(); len(errs) > 0 {
				t.Fatalf("CDI cache errors: %v", errs)
			}
			for _, r := range rs {
				for i := range r.Devices {
					d := &r.Devices[i]
					for _, strategy := range []string{configv1.DeviceIDStrategyUUID, configv1.DeviceIDStrategyIndex} {
						q := QualifiedName(r, d, strategy)
						dev := cache.GetDevice(q)
						if dev == nil {
							t.Fatalf("%s: device %s not in the CDI cache", r.Name, q)
						}
						if got := dev.ContainerEdits.DeviceNodes[0].HostPath; got != filepath.Join("/run/nvidia/driver", d.Paths[0]) {
							t.Errorf("%s: host path %s", q, got)
						}
					}
				}
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != len(rs) {
				t.Errorf("%d files in %s, want one per resource (%d)", len(entries), dir, len(rs))
			}
		})
	}
}

func TestWriteKeepsOldSpecOnInvalid(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	good := build(t, "version: v1\n", gpus(1))[0]
	path, err := w.Write(good)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	bad := build(t, "version: v1\n", []gpu.Device{{UUID: "GPU bad/uuid", Name: "x"}})[0]
	if _, err := w.Write(bad); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Fatalf("got %v, want a validation error", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Error("the previous spec changed after a failed write")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("leftover files: %v", entries)
	}
	if err := w.Remove(good); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("spec still there after Remove: %v", err)
	}
}

func TestMPSSpecMountsPipe(t *testing.T) {
	w, err := NewWriter(Options{Dir: t.TempDir(), MPSRoot: "/mps"})
	if err != nil {
		t.Fatal(err)
	}
	r := build(t, "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", gpus(1))[0]
	spec, err := w.Spec(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.ContainerEdits.Mounts) != 1 || spec.ContainerEdits.Mounts[0].HostPath != "/mps/gpu/pipe" {
		t.Errorf("mounts = %+v", spec.ContainerEdits.Mounts)
	}
	if len(spec.Devices) != 2 {
		t.Errorf("devices = %d, want the GPU under its UUID and index once, not per replica", len(spec.Devices))
	}
}
