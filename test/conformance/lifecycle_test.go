package conformance

import (
	"os"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// TestKubeletRestart restarts the kubelet's device manager under a running
// agent: it must register again within 2 s with the same devices, none lost
// or doubled.
func TestKubeletRestart(t *testing.T) {
	k := startKubelet(t)
	startAgent(t, "dgxh100", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 16, 16)
	for i := range 3 {
		k.shutdown()
		k = startKubelet(t)
		took := k.waitCounts(2*time.Second, "nvidia.com/gpu", 16, 16)
		t.Logf("restart %d: registered again after %v", i+1, took)
		if _, err := k.admit("nvidia.com/gpu", 2); err != nil {
			t.Fatalf("allocation after restart %d: %v", i+1, err)
		}
	}
}

// TestXIDHealth injects a critical XID on one GPU: the kubelet must see it
// unhealthy within 1 s, keep allocating the others, and see it healthy
// again after probation.
func TestXIDHealth(t *testing.T) {
	k := startKubelet(t)
	// Probation is long enough that the GPU cannot recover before the
	// allocation below, even on a loaded machine.
	n := startAgent(t, "dgxh100", "version: v1\nhealth:\n  probation: 3s\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
	devs, err := n.sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ignored XID changes nothing", func(t *testing.T) {
		if err := n.sim.InjectXID(2, 13); err != nil {
			t.Fatal(err)
		}
		if err := n.sim.InjectXID(3, 79); err != nil { // a marker after it
			t.Fatal(err)
		}
		k.waitCounts(time.Second, "nvidia.com/gpu", 8, 7)
	})
	t.Run("critical XID seen within 1s", func(t *testing.T) {
		took := k.waitCounts(time.Second, "nvidia.com/gpu", 8, 7)
		t.Logf("XID 79 to Unhealthy in the kubelet: %v", took)
	})
	t.Run("allocation avoids the unhealthy GPU", func(t *testing.T) {
		a, err := k.admit("nvidia.com/gpu", 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range gpuIndexes(t, devs, a.devices) {
			if i == 3 {
				t.Error("unhealthy GPU 3 allocated")
			}
		}
		k.releaseAll()
	})
	t.Run("recovers after probation", func(t *testing.T) {
		k.waitCounts(10*time.Second, "nvidia.com/gpu", 8, 8)
	})
}

// TestGPULost drops a GPU from the bus: it turns unhealthy and stays so
// while lost; once back it recovers.
func TestGPULost(t *testing.T) {
	k := startKubelet(t)
	n := startAgent(t, "dgxh100", "version: v1\nhealth:\n  probation: 500ms\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
	if err := n.sim.LoseGPU(5); err != nil {
		t.Fatal(err)
	}
	k.waitCounts(time.Second, "nvidia.com/gpu", 8, 7)
	if _, err := k.admit("nvidia.com/gpu", 7); err != nil {
		t.Fatalf("the other 7 GPUs must still allocate: %v", err)
	}
	k.releaseAll()
	if err := n.sim.Recover(5); err != nil {
		t.Fatal(err)
	}
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
}

// TestMIGDeviceXID injects an XID on one MIG device: only that device turns
// unhealthy, its siblings on the same GPU stay allocatable.
func TestMIGDeviceXID(t *testing.T) {
	k := startKubelet(t)
	var small string
	n := startAgent(t, "dgxh100", "version: v1\nflags:\n  migStrategy: mixed\nhealth:\n  probation: 2s\n", func(b *sim.Backend) {
		small = partition(t, b, 0, 1, 7)
	})
	name := "nvidia.com/mig-" + small
	k.waitCounts(5*time.Second, name, 7, 7)
	devs, err := n.sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	m := devs[0].MIGDevices[2]
	if err := n.sim.InjectMIGXID(0, m.GPUInstanceID, m.ComputeInstanceID, 94); err != nil {
		t.Fatal(err)
	}
	k.waitCounts(time.Second, name, 7, 6)
	k.waitCounts(time.Second, "nvidia.com/gpu", 7, 7)
	a, err := k.admit(name, 6)
	if err != nil {
		t.Fatalf("the 6 healthy MIG devices must allocate: %v", err)
	}
	for _, id := range a.devices {
		if id == m.UUID {
			t.Errorf("unhealthy MIG device %s allocated", id)
		}
	}
	k.releaseAll()
	k.waitCounts(5*time.Second, name, 7, 7)
}

// TestReload rewrites the config under a running agent and reloads it, as
// SIGHUP does: a valid change reaches the kubelet, an invalid one leaves the
// last good config running.
func TestReload(t *testing.T) {
	k := startKubelet(t)
	n := startAgent(t, "dgxh100", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 16, 16)
	reload := func(config string) {
		t.Helper()
		if err := os.WriteFile(n.config, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		n.reload <- struct{}{}
	}
	t.Run("valid change", func(t *testing.T) {
		reload("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 5\n")
		// The plugin keeps its registration and sends the new list on the
		// kubelet's open stream. Registering again would let the end of the
		// old stream disconnect the new registration (allocatable 0 below).
		k.waitCounts(15*time.Second, "nvidia.com/gpu", 40, 40)
	})
	t.Run("invalid change keeps the last good config", func(t *testing.T) {
		reload("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n")
		// The reload is handled before the next one is accepted.
		n.reload <- struct{}{}
		if c, a := k.counts("nvidia.com/gpu"); c != 40 || a != 40 {
			t.Fatalf("capacity %d allocatable %d after an invalid reload, want 40 and 40", c, a)
		}
		if _, err := k.admit("nvidia.com/gpu", 1); err != nil {
			t.Fatal(err)
		}
	})
}
