package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// fakeHealth is a health source that knows a fixed set of devices.
type fakeHealth struct {
	healthy map[string]bool
	ch      chan struct{}
}

func (f *fakeHealth) Healthy(uuid string) bool { return f.healthy[uuid] }
func (f *fakeHealth) Changes() (<-chan struct{}, func()) {
	return f.ch, func() {}
}

func TestMIGGateWithdrawsAndNotifies(t *testing.T) {
	inner := &fakeHealth{healthy: map[string]bool{"GPU-0": true, "GPU-1": true, "MIG-1a": true}, ch: make(chan struct{}, 1)}
	reload := make(chan struct{}, 1)
	g := newMIGGate(reload)
	h := g.wrap(inner)
	g.setResources([]*sharing.Resource{
		{Name: "nvidia.com/gpu", Devices: []sharing.Device{{ID: "GPU-0", UUID: "GPU-0", GPUIndex: 0, GPUUUID: "GPU-0"}}},
		{Name: "nvidia.com/mig-1g.10gb", Devices: []sharing.Device{{ID: "MIG-1a", UUID: "MIG-1a", GPUIndex: 1, GPUUUID: "GPU-1", MIG: &gpu.MIGDevice{}}}},
	})
	changes, stop := h.Changes()
	defer stop()
	if !h.Healthy("GPU-0") || !h.Healthy("MIG-1a") {
		t.Fatal("devices unhealthy before any withdrawal")
	}
	g.Withdraw([]int{1})
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Fatal("withdrawing sent no change to the device plugin")
	}
	if h.Healthy("MIG-1a") || h.Healthy("GPU-1") || !h.Healthy("GPU-0") {
		t.Error("GPU 1's devices still offered, or GPU 0's withdrawn")
	}
	g.Withdraw(nil)
	if !h.Healthy("MIG-1a") {
		t.Error("GPU 1's device not offered again")
	}
	// The inner source's changes pass through.
	inner.ch <- struct{}{}
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Fatal("the health monitor's change did not pass through")
	}
	// A device the gate learns of was unhealthy to it (unknown) until
	// now: the plugin is told, and not again for devices it knows.
	learn := []*sharing.Resource{{Name: "nvidia.com/mig-1g.10gb", Devices: []sharing.Device{
		{ID: "MIG-1b", UUID: "MIG-1b", GPUIndex: 1, GPUUUID: "GPU-1", MIG: &gpu.MIGDevice{}}}}}
	g.setResources(learn)
	select {
	case <-changes:
	default:
		t.Fatal("learning a new device sent no change to the device plugin")
	}
	g.setResources(learn)
	select {
	case <-changes:
		t.Error("devices the gate already knew sent a change")
	default:
	}
	// Refresh asks the plugin to reload and waits until it serves again.
	done := make(chan error, 1)
	go func() { done <- g.Refresh(context.Background()) }()
	select {
	case <-reload:
	case <-time.After(5 * time.Second):
		t.Fatal("Refresh sent no reload")
	}
	g.setResources(nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMIGClusterConfigMap(t *testing.T) {
	c := &migCluster{namespace: "gpuplane", configMap: "mig", key: "config.yaml", triggerOut: make(chan struct{}, 1)}
	c.label = "all-balanced"
	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
		want string
	}{
		{"absent", nil, "the MIG ConfigMap gpuplane/mig does not exist"},
		{"wrong key", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mig"}, Data: map[string]string{"config": "x"}}, `has no key "config.yaml" (it has config)`},
		{"good", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mig"}, Data: map[string]string{"config.yaml": "version: v1"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.setConfigMap(tc.cm)
			name, data, err := c.Desired(context.Background())
			if name != "all-balanced" {
				t.Errorf("name %q", name)
			}
			if tc.want == "" {
				if err != nil || string(data) != "version: v1" {
					t.Fatalf("data %q err %v", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	c.label = ""
	if name, _, err := c.Desired(context.Background()); name != "" || err != nil {
		t.Errorf("an unlabelled node: %q %v", name, err)
	}
}

// TestMIGGateNewMIGDevicesBehindTheLedger: with the DRA driver on, the
// device plugin's health is the ledger over the monitor; a MIG device made
// by a re-partition after the monitor started is as healthy as its GPU
// there too (it was reported unhealthy, so a new layout's devices never
// became allocatable), and not when a claim holds it.
func TestMIGGateNewMIGDevicesBehindTheLedger(t *testing.T) {
	b := simNode(t, "dgxh100")
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mon, err := health.NewMonitor(b, devs, health.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New()
	g := newMIGGate(make(chan struct{}, 1))
	h := g.wrap(newLedgerHealth(mon, l))
	parent := devs[3].UUID
	g.setResources([]*sharing.Resource{{Name: "nvidia.com/mig-3g.40gb", Devices: []sharing.Device{
		{ID: "MIG-new-a", UUID: "MIG-new-a", GPUIndex: 3, GPUUUID: parent, MIG: &gpu.MIGDevice{}},
		{ID: "MIG-new-b", UUID: "MIG-new-b", GPUIndex: 3, GPUUUID: parent, MIG: &gpu.MIGDevice{}},
	}}})
	if !h.Healthy("MIG-new-a") || !h.Healthy("MIG-new-b") {
		t.Fatal("MIG devices made after the monitor started are unhealthy behind the ledger")
	}
	if err := l.Hold("claim-1", []ledger.Hold{{Device: "MIG-new-b", GPU: parent}}); err != nil {
		t.Fatal(err)
	}
	if h.Healthy("MIG-new-b") || !h.Healthy("MIG-new-a") {
		t.Error("a claimed new MIG device is still offered, or its unclaimed sibling is not")
	}
	g.Withdraw([]int{3})
	if h.Healthy("MIG-new-a") {
		t.Error("a withdrawn GPU's new MIG device is offered")
	}
}

// Re-partitioning GPU 1 again and again gives its MIG devices new UUIDs
// each time: the gate keeps the devices of the resources served and of
// those served before (which the kubelet may ask about until it is sent
// the new ones), not every device it ever saw. A device of the set before
// on a GPU being re-partitioned stays withdrawn.
func TestMIGGateForgetsDevicesOfOldPartitions(t *testing.T) {
	inner := &fakeHealth{healthy: map[string]bool{}, ch: make(chan struct{}, 1)}
	g := newMIGGate(make(chan struct{}, 1))
	h := g.wrap(inner)
	set := func(gen int) []*sharing.Resource {
		var devs []sharing.Device
		for k := range 7 {
			id := fmt.Sprintf("MIG-%d-%d", gen, k)
			inner.healthy[id] = true
			devs = append(devs, sharing.Device{ID: id, UUID: id, GPUIndex: 1, GPUUUID: "GPU-1", MIG: &gpu.MIGDevice{}})
		}
		return []*sharing.Resource{{Name: "nvidia.com/mig-1g.10gb", Devices: devs}}
	}
	for gen := range 50 {
		g.setResources(set(gen))
		if n := len(g.gpuOf) + len(g.prevGPUOf); n > 2*8 {
			t.Fatalf("generation %d: %d devices kept, want at most the two sets served last (16)", gen, n)
		}
	}
	g.Withdraw([]int{1})
	if h.Healthy("MIG-48-0") {
		t.Error("a device of the set served before, on a GPU being re-partitioned, looks healthy")
	}
	if h.Healthy("MIG-49-0") {
		t.Error("a device of the set served, on a GPU being re-partitioned, looks healthy")
	}
	g.Withdraw(nil)
	if !h.Healthy("MIG-49-0") {
		t.Error("a device served is unhealthy with nothing withdrawn")
	}
}
