package conformance

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// TestContainerContract allocates through the kubelet with every device
// list strategy on and checks what the kubelet would hand the runtime: the
// NVIDIA_VISIBLE_DEVICES list, CDI devices and annotations that resolve in
// the CDI specs the agent wrote, and the device nodes.
func TestContainerContract(t *testing.T) {
	k := startKubelet(t)
	n := startAgent(t, "dgxh100", "version: v1\nflags:\n  plugin:\n    passDeviceSpecs: true\n    deviceListStrategy: [envvar, cdi-cri, cdi-annotations]\n    deviceIDStrategy: index\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
	a, err := k.admit("nvidia.com/gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := n.sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	idx := gpuIndexes(t, devs, a.devices)
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("envvar lists indexes", func(t *testing.T) {
		var want []string
		for _, i := range idx {
			want = append(want, strconv.Itoa(devs[i].Index))
		}
		got := strings.Split(a.env("NVIDIA_VISIBLE_DEVICES"), ",")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("NVIDIA_VISIBLE_DEVICES %v, want %v", got, want)
		}
	})
	t.Run("CDI devices resolve", func(t *testing.T) {
		if len(a.opts.CDIDevices) != 2 {
			t.Fatalf("CDI devices %v, want 2", a.opts.CDIDevices)
		}
		for _, d := range a.opts.CDIDevices {
			if cache.GetDevice(d.Name) == nil {
				t.Errorf("CDI device %s not in the agent's specs", d.Name)
			}
		}
	})
	t.Run("CDI annotations resolve", func(t *testing.T) {
		annotations := map[string]string{}
		for _, an := range a.opts.Annotations {
			annotations[an.Name] = an.Value
		}
		_, names, err := cdiapi.ParseAnnotations(annotations)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 2 {
			t.Fatalf("annotated devices %v, want 2", names)
		}
		for _, name := range names {
			if cache.GetDevice(name) == nil {
				t.Errorf("annotated device %s not in the agent's specs", name)
			}
		}
	})
	t.Run("device nodes", func(t *testing.T) {
		var paths []string
		for _, d := range a.opts.Devices {
			paths = append(paths, d.PathInContainer)
		}
		for _, want := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", devs[idx[0]].Path(), devs[idx[1]].Path()} {
			if !slices.Contains(paths, want) {
				t.Errorf("device nodes %v lack %s", paths, want)
			}
		}
	})
}
