package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// The part of its GPU each device is: a whole GPU, a replica, and MIG
// devices of 3 and 1 slices of an H100's 7.
func TestShareBook(t *testing.T) {
	b := simNode(t, "dgxh100")
	ctx := context.Background()
	if err := b.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	for _, profile := range []string{"3g.40gb", "1g.10gb"} {
		gi, err := b.CreateGPUInstance(ctx, 0, profile, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.CreateComputeInstance(ctx, 0, gi.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	devices, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configv1.Load(strings.NewReader("version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sharing.Build(cfg, devices)
	if err != nil {
		t.Fatal(err)
	}
	served := sharing.NewServed(rs)
	book := newShareBook(b, func() *sharing.Served { return served }, slog.New(slog.DiscardHandler))
	want := map[string]float64{"nvidia.com/gpu": 0.25, "nvidia.com/mig-3g.40gb": 3.0 / 7, "nvidia.com/mig-1g.10gb": 1.0 / 7}
	for _, r := range rs {
		w, ok := want[r.Name]
		if !ok {
			t.Fatalf("unexpected resource %s", r.Name)
		}
		for _, d := range r.Devices {
			if got, ok := book.of("ns", "pod", r.Name, d.ID); !ok || got != w {
				t.Errorf("%s device %s: share %v (%v), want %v", r.Name, d.ID, got, ok, w)
			}
		}
	}
	if _, ok := book.of("ns", "pod", "nvidia.com/gpu", "GPU-unknown"); ok {
		t.Error("a device the plugin does not serve has a share")
	}
	// A pod given half of GPU 3 is charged half for its replica there;
	// MIG devices and other pods keep their device's share.
	book.charged = func(namespace, pod string, gpu int) (float64, bool) {
		return 0.5, namespace == "ml" && pod == "half" && gpu == 3
	}
	for _, r := range rs {
		for _, d := range r.Devices {
			w := want[r.Name]
			if r.Name == "nvidia.com/gpu" && d.GPUIndex == 3 {
				w = 0.5
			}
			if got, ok := book.of("ml", "half", r.Name, d.ID); !ok || got != w {
				t.Errorf("half's %s device %s: share %v (%v), want %v", r.Name, d.ID, got, ok, w)
			}
			if got, _ := book.of("ml", "other", r.Name, d.ID); got != want[r.Name] {
				t.Errorf("another pod's %s device %s: share %v, want %v", r.Name, d.ID, got, want[r.Name])
			}
		}
	}
}
