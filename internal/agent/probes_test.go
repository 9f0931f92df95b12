package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/health"
)

// TestProbes checks what the agent's probes say before its parts run: not
// ready, naming the parts; alive until the health monitor has received no
// GPU events for liveGrace.
func TestProbes(t *testing.T) {
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "probe-node"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := newMonitorHealth(devs)
	pr := newProbes(h)
	now := time.Unix(1000, 0)
	pr.now = func() time.Time { return now }

	if err := pr.ready(); err == nil || !strings.Contains(err.Error(), "device plugin: starting") {
		t.Errorf("ready before the plugin starts = %v, want the device plugin named", err)
	}
	if err := pr.live(); err != nil {
		t.Errorf("live before the monitor exists = %v", err)
	}
	// A monitor that is not running receives no events.
	mon, err := health.NewMonitor(b, devs, health.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.set(mon)
	if err := pr.ready(); err == nil || !strings.Contains(err.Error(), "health monitor: not receiving GPU events") {
		t.Errorf("ready with the monitor down = %v, want the monitor named", err)
	}
	if err := pr.live(); err != nil {
		t.Errorf("live when the monitor just went down = %v", err)
	}
	now = now.Add(liveGrace - time.Second)
	if err := pr.live(); err != nil {
		t.Errorf("live within the grace = %v", err)
	}
	now = now.Add(2 * time.Second)
	if err := pr.live(); err == nil || !strings.Contains(err.Error(), "no GPU events for 2m1s") {
		t.Errorf("live after the grace = %v, want how long the monitor has been down", err)
	}
}
