package quarantine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

func TestBackendGPUs(t *testing.T) {
	ctx := context.Background()
	p, err := sim.Load("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if err := b.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	gi, err := b.CreateGPUInstance(ctx, 2, "3g.20gb", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateComputeInstance(ctx, 2, gi.ID, ""); err != nil {
		t.Fatal(err)
	}
	devices, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := BackendGPUs{Backend: b, Devices: devices}

	if err := b.LoseGPU(3); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, 3); !errors.Is(err, gpu.ErrGPULost) {
		t.Fatalf("Check of a lost GPU = %v", err)
	}
	if err := g.Reset(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, 3); err != nil {
		t.Fatalf("Check after the reset = %v", err)
	}
	// A reset destroys GPU 2's MIG instances: it must not pass as if
	// nothing had happened.
	if err := g.Check(ctx, 2); err != nil {
		t.Fatalf("Check of a MIG GPU before its reset = %v", err)
	}
	if err := g.Reset(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, 2); err == nil || !strings.Contains(err.Error(), "1 of its 1 MIG devices are gone") {
		t.Fatalf("Check after a reset that destroyed the MIG devices = %v", err)
	}
	if err := (BackendGPUs{Backend: &gpu.Null{}}).Reset(ctx, 0); !errors.Is(err, gpu.ErrNotSupported) {
		t.Fatalf("Reset on a backend without one = %v", err)
	}
}
