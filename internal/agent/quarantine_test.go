package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/quarantine"
)

func TestSimControlPart(t *testing.T) {
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name    string
		backend gpu.Backend
		addr    string
		err     string
	}{
		{"not simulated", &gpu.Null{}, "127.0.0.1:0", "--simulate-control-addr: only with --simulate"},
		{"all interfaces", b, ":0", "is not a loopback address"},
		{"another host", b, "10.0.0.1:9999", "is not a loopback address"},
		{"not host:port", b, "127.0.0.1", "is not host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := simControlPart(tc.backend, tc.addr, log)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("simControlPart = %v, want %q", err, tc.err)
			}
		})
	}
	t.Run("loopback", func(t *testing.T) {
		part, err := simControlPart(b, "127.0.0.1:0", log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- part.run(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("the control part ended with %v", err)
		}
	})
}

// quarantineFakes stand for the Node and the pods of a quarantine whose
// GPUs are simulated: no pod holds a GPU, so a fault goes straight to the
// reset.
type quarantineFakes struct {
	held   map[string]bool
	events []string
}

func (f *quarantineFakes) Hold(uuid, _ string) { f.held[uuid] = true }
func (f *quarantineFakes) Release(uuid string) { delete(f.held, uuid) }
func (f *quarantineFakes) Eventf(_, reason, messageFmt string, args ...any) {
	f.events = append(f.events, reason+": "+fmt.Sprintf(messageFmt, args...))
}
func (f *quarantineFakes) OnGPU(context.Context, int) ([]quarantine.PodRef, error) { return nil, nil }
func (f *quarantineFakes) Evict(context.Context, quarantine.PodRef) error          { return nil }
func (f *quarantineFakes) Record(context.Context) (gpunode.QuarantineRecord, error) {
	return gpunode.QuarantineRecord{}, nil
}
func (f *quarantineFakes) Write(context.Context, quarantine.NodeStatus) error { return nil }

// TestQuarantineResetRefreshesDRA: GPU 1 has a static 3g.40gb instance
// (applied by the MIG part, which had the DRA driver read it); an XID 48
// quarantines the GPU and its reset destroys the instance. With the driver
// on, its ResourceSlices then show the GPU as the reset left it.
func TestQuarantineResetRefreshesDRA(t *testing.T) {
	ctx := context.Background()
	const mig3g, mig1g = "gpu-1-mig-3g-40gb-0-4", "gpu-1-mig-1g-10gb-0-1"
	// staticShown says whether the driver publishes the static instance:
	// the 3g.40gb device with its UUID, and a 1g.10gb spot under it
	// tainted.
	staticShown := func(d *dra.Driver) (uuid, blocked bool) {
		for _, s := range d.Resources().Pools["node-a"].Slices {
			for _, dv := range s.Devices {
				switch dv.Name {
				case mig3g:
					_, uuid = dv.Attributes[apidra.AttrUUID]
				case mig1g:
					blocked = slices.ContainsFunc(dv.Taints, func(tn resourceapi.DeviceTaint) bool { return tn.Key == apidra.TaintMIGLayout })
				}
			}
		}
		return uuid, blocked
	}
	// node is a DRA node whose GPU 1 has the static instance, published.
	node := func(t *testing.T) (*sim.Backend, *draLink, []gpu.Device) {
		t.Helper()
		b, link := draNode(t)
		devices, err := b.Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gi, err := b.CreateGPUInstance(ctx, 1, "3g.40gb", &gpu.Placement{Start: 0, Size: 4})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.CreateComputeInstance(ctx, 1, gi.ID, ""); err != nil {
			t.Fatal(err)
		}
		if err := link.driver.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if uuid, blocked := staticShown(link.driver); !uuid || !blocked {
			t.Fatalf("before the fault: %s with its UUID %v, %s tainted %v; want both", mig3g, uuid, mig1g, blocked)
		}
		return b, link, devices
	}
	// quarantineGPU1 runs the agent's quarantine, with link to the DRA
	// driver, through GPU 1's reset.
	quarantineGPU1 := func(t *testing.T, b *sim.Backend, devices []gpu.Device, link *draLink) (*quarantineFakes, *prometheus.Registry) {
		t.Helper()
		q := &quarantinePart{backend: b, devices: devices, metrics: quarantine.NewMetrics(), log: slog.New(slog.DiscardHandler),
			first: quarantine.PolicyFrom(configv1.Quarantine{}), dra: link}
		reg := prometheus.NewRegistry()
		if err := q.register(reg); err != nil {
			t.Fatal(err)
		}
		f := &quarantineFakes{held: map[string]bool{}}
		o := q.options(f, f)
		o.Pods, o.Node = f, f
		c, err := quarantine.New(o)
		if err != nil {
			t.Fatal(err)
		}
		c.Fault(ctx, health.Fault{GPU: 1, UUID: devices[1].UUID, XID: 48, Time: time.Now()})
		if got := c.Quarantined()[1]; got != gpunode.QuarantineValidating {
			t.Fatalf("GPU 1 is %q after its fault, want it reset and %s; events %q", got, gpunode.QuarantineValidating, f.events)
		}
		if gis, _ := b.GPUInstances(ctx, 1); len(gis) != 0 {
			t.Fatalf("GPU 1's instances after the reset: %+v", gis)
		}
		return f, reg
	}
	refreshes := func(t *testing.T, reg *prometheus.Registry) map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "gpuplane_gpu_quarantine_inventory_refreshes_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" {
						out[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}

	t.Run("with the driver on, it reads the GPUs again after the reset", func(t *testing.T) {
		b, link, devices := node(t)
		f, reg := quarantineGPU1(t, b, devices, link)
		if uuid, blocked := staticShown(link.driver); uuid || blocked {
			t.Errorf("after the reset: %s with its UUID %v, %s tainted %v; want neither, the instance is gone", mig3g, uuid, mig1g, blocked)
		}
		if got := refreshes(t, reg); !maps.Equal(got, map[string]float64{"ok": 1}) {
			t.Errorf("inventory refreshes %v, want one ok", got)
		}
		for _, e := range f.events {
			if strings.HasPrefix(e, quarantine.ReasonRefreshFailed) {
				t.Errorf("event %q", e)
			}
		}
	})

	t.Run("with the driver off, nothing is read", func(t *testing.T) {
		b, link, devices := node(t)
		for name, off := range map[string]*draLink{"no link": nil, "link without driver": newDRALink(b, devices)} {
			q := &quarantinePart{dra: off}
			if inv := q.options(nil, nil).Inventory; inv != nil {
				t.Errorf("%s: the quarantine reads %T again after a reset", name, inv)
			}
		}
		// The driver not linked to the quarantine still shows the
		// instance: in the case above, the quarantine read it again.
		_, reg := quarantineGPU1(t, b, devices, newDRALink(b, devices))
		if uuid, blocked := staticShown(link.driver); !uuid || !blocked {
			t.Errorf("an unlinked driver was read again: %s with its UUID %v, %s tainted %v", mig3g, uuid, mig1g, blocked)
		}
		if got := refreshes(t, reg); len(got) != 0 {
			t.Errorf("inventory refreshes %v with the driver off", got)
		}
	})
}
