package dra

import (
	"context"
	"strings"
	"testing"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/ledger"
)

func deviceTaints(d *Driver) map[string][]string {
	out := map[string][]string{}
	for _, s := range d.Resources().Pools[testNode].Slices {
		for _, dv := range s.Devices {
			out[dv.Name] = nil
			for _, t := range dv.Taints {
				out[dv.Name] = append(out[dv.Name], t.Key)
			}
		}
	}
	return out
}

func TestLayoutChange(t *testing.T) {
	ctx := context.Background()
	b := simBackend(t)
	l := ledger.New()
	d := testDriver(t, b, t.TempDir(), l, nil)
	dyn := claim("dyn", "gpu-1-mig-3g-40gb-4-4").obj()
	if _, err := prepareOne(t, d, dyn); err != nil {
		t.Fatal(err)
	}

	t.Run("the claims and instances it holds on a GPU", func(t *testing.T) {
		ref, ok := d.PreparedClaim("dyn")
		if !ok || ref.Namespace != "ns" || ref.Name != "claim-dyn" {
			t.Errorf("PreparedClaim = %+v, %v", ref, ok)
		}
		if _, ok := d.PreparedClaim("nope"); ok {
			t.Error("an unknown claim is prepared")
		}
		gis, err := b.GPUInstances(ctx, 1)
		if err != nil || len(gis) != 1 {
			t.Fatalf("GPU instances %+v, %v", gis, err)
		}
		if got := d.CreatedInstances(1); len(got) != 1 || got[gis[0].ID] != "dyn" {
			t.Errorf("CreatedInstances(1) = %v, want GPU instance %d of claim dyn", got, gis[0].ID)
		}
		if got := d.CreatedInstances(0); len(got) != 0 {
			t.Errorf("CreatedInstances(0) = %v", got)
		}
		devs, err := b.Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.ClaimsOn(devs[1].UUID); len(got) != 1 || got[0] != "dyn" {
			t.Errorf("the ledger's claims on GPU 1 = %v", got)
		}
	})

	t.Run("a withdrawn GPU is tainted and prepares nothing", func(t *testing.T) {
		d.Withdraw([]int{0})
		for name, taints := range deviceTaints(d) {
			want := strings.HasPrefix(name, "gpu-0-") || name == "gpu-0"
			got := false
			for _, k := range taints {
				got = got || k == apidra.TaintMIGChanging
			}
			if got != want {
				t.Errorf("device %s taints %v, want %s: %v", name, taints, apidra.TaintMIGChanging, want)
			}
		}
		_, err := prepareOne(t, d, claim("late", "gpu-0-mig-1g-10gb-0-1").obj())
		if err == nil || !strings.Contains(err.Error(), "GPU 0 is being re-partitioned") {
			t.Errorf("prepare on a withdrawn GPU: %v", err)
		}
		if _, err := prepareOne(t, d, claim("other", "gpu-2").obj()); err != nil {
			t.Errorf("prepare on another GPU: %v", err)
		}
		d.Withdraw(nil)
		if _, err := prepareOne(t, d, claim("late", "gpu-0-mig-1g-10gb-0-1").obj()); err != nil {
			t.Errorf("prepare once the GPU is back: %v", err)
		}
		if got := d.Withdrawn(); len(got) != 0 {
			t.Errorf("Withdrawn = %v", got)
		}
	})

	t.Run("refresh publishes the new layout", func(t *testing.T) {
		// GPU 3 enters MIG mode with one static 7g instance; GPU 1 keeps
		// the claim's dynamic instance as the claim's.
		if err := b.SetMIGMode(ctx, 3, true); err != nil {
			t.Fatal(err)
		}
		gi, err := b.CreateGPUInstance(ctx, 3, "7g.80gb", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.CreateComputeInstance(ctx, 3, gi.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, ok := deviceTaints(d)["gpu-3-mig-1g-10gb-0-1"]; ok {
			t.Fatal("MIG devices of GPU 3 before the refresh")
		}
		if err := d.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.republish:
		default:
			t.Error("Refresh did not ask for the slices to be published")
		}
		taints := deviceTaints(d)
		if got, ok := taints["gpu-3-mig-1g-10gb-0-1"]; !ok || len(got) != 1 || got[0] != apidra.TaintMIGLayout {
			t.Errorf("gpu-3-mig-1g-10gb-0-1 after the refresh: published %v, taints %v; want it tainted by the static 7g instance", ok, got)
		}
		if got := taints["gpu-1-mig-3g-40gb-4-4"]; len(got) != 0 {
			t.Errorf("the claim's own instance taints its device: %v", got)
		}
		var counters int
		for _, s := range d.Resources().Pools[testNode].Slices {
			for _, c := range s.SharedCounters {
				if c.Name == counterSetName(3) {
					counters++
				}
			}
		}
		if counters != 1 {
			t.Errorf("GPU 3's counter set published %d times", counters)
		}
		if _, ok := taints["gpu-3"]; ok {
			t.Error("GPU 3 in MIG mode is still published whole")
		}
		if _, err := prepareOne(t, d, claim("whole3", "gpu-3").obj()); err == nil || !strings.Contains(err.Error(), "out of date") {
			t.Errorf("a claim allocated GPU 3 whole before the change: %v", err)
		}
	})
}
