package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// migBackend is a DGX H100 with MIG enabled on GPU 0.
func migBackend(t *testing.T) *Backend {
	t.Helper()
	b, _ := newTestBackend(t, "dgxh100")
	if err := b.SetMIGMode(context.Background(), 0, true); err != nil {
		t.Fatalf("SetMIGMode: %v", err)
	}
	return b
}

func TestMIGProfilesMatchGoNVMLTables(t *testing.T) {
	tests := []struct {
		profile string
		want    map[string]int // name -> instance count
	}{
		{"dgxh100", map[string]int{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}},
		{"dgxa100", map[string]int{"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			b, _ := newTestBackend(t, tt.profile)
			profs, err := b.MIGProfiles(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, p := range profs {
				got[p.Name] = p.InstanceCount
				if len(p.Placements) < p.InstanceCount {
					t.Errorf("%s: %d placements for %d instances", p.Name, len(p.Placements), p.InstanceCount)
				}
				for _, pl := range p.Placements {
					if pl.Start+pl.Size > 8 || pl.Start%pl.Size != 0 {
						t.Errorf("%s: placement %+v outside 8 aligned memory slices", p.Name, pl)
					}
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("profiles = %v, want %v", got, tt.want)
			}
			for name, n := range tt.want {
				if got[name] != n {
					t.Errorf("%s: %d instances, want %d", name, got[name], n)
				}
			}
		})
	}
}

func TestSevenSmallInstancesOnH100(t *testing.T) {
	ctx := context.Background()
	b := migBackend(t)
	var gis []gpu.GPUInstance
	for i := range 7 {
		gi, err := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
		if err != nil {
			t.Fatalf("instance %d: %v", i+1, err)
		}
		if gi.Placement != (gpu.Placement{Start: i, Size: 1}) || gi.Profile != "1g.10gb" {
			t.Errorf("instance %d = %+v", i+1, gi)
		}
		if _, err := b.CreateComputeInstance(ctx, 0, gi.ID, ""); err != nil {
			t.Fatalf("compute instance in %d: %v", gi.ID, err)
		}
		gis = append(gis, gi)
	}
	_, err := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
	if !errors.Is(err, gpu.ErrInsufficientResources) {
		t.Fatalf("eighth 1g.10gb: err = %v, want ErrInsufficientResources", err)
	}
	for _, w := range []string{"gpu 0", "1g.10gb", GPUUUID("node-a", 0)} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	migs := devs[0].MIGDevices
	if len(migs) != 7 {
		t.Fatalf("%d MIG devices, want 7", len(migs))
	}
	seen := map[string]bool{}
	for _, m := range migs {
		if !strings.HasPrefix(m.UUID, "MIG-") || seen[m.UUID] {
			t.Errorf("MIG UUID %q not a distinct MIG- UUID", m.UUID)
		}
		seen[m.UUID] = true
		if m.Profile != "1g.10gb" || m.MemoryMiB != 10240 || m.MultiprocessorCount != 16 || m.GPUSlices != 1 ||
			m.ComputeSlices != 1 || m.ParentUUID != devs[0].UUID || m.Engines.Copy != 1 {
			t.Errorf("MIG device = %+v", m)
		}
	}
	if len(devs[1].MIGDevices) != 0 || devs[1].MIG.Current {
		t.Errorf("GPU 1 changed: %+v", devs[1].MIG)
	}
	// Destroying one frees exactly its slice.
	last := gis[3]
	if err := b.DestroyComputeInstance(ctx, 0, last.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.DestroyGPUInstance(ctx, 0, last.ID); err != nil {
		t.Fatal(err)
	}
	gi, err := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
	if err != nil || gi.Placement != last.Placement {
		t.Errorf("after destroy: %+v, %v; want placement %+v", gi, err, last.Placement)
	}
}

func TestMIGCapacity(t *testing.T) {
	ctx := context.Background()
	type step struct {
		profile   string
		placement *gpu.Placement
		wantErr   error
	}
	at := func(start, size int) *gpu.Placement { return &gpu.Placement{Start: start, Size: size} }
	tests := []struct {
		name  string
		steps []step
	}{
		{"two 3g fill the memory", []step{{"3g.40gb", nil, nil}, {"3g.40gb", nil, nil}, {"1g.10gb", nil, gpu.ErrInsufficientResources}}},
		{"7g takes the GPU", []step{{"7g.80gb", nil, nil}, {"1g.10gb", nil, gpu.ErrInsufficientResources}}},
		{"4g then 3g", []step{{"4g.40gb", nil, nil}, {"3g.40gb", nil, nil}, {"1g.10gb", nil, gpu.ErrInsufficientResources}}},
		{"3g at 4 blocks 4g", []step{{"3g.40gb", at(4, 4), nil}, {"4g.40gb", nil, nil}, {"2g.20gb", nil, gpu.ErrInsufficientResources}}},
		{"explicit overlap", []step{{"2g.20gb", at(2, 2), nil}, {"1g.10gb", at(3, 1), gpu.ErrInsufficientResources}, {"1g.10gb", at(4, 1), nil}}},
		{"not a placement", []step{{"2g.20gb", at(1, 2), gpu.ErrNotFound}}},
		{"unknown profile", []step{{"5g.50gb", nil, gpu.ErrNotFound}}},
		{"four 1g.20gb", []step{{"1g.20gb", nil, nil}, {"1g.20gb", nil, nil}, {"1g.20gb", nil, nil}, {"1g.20gb", nil, nil}, {"1g.20gb", nil, gpu.ErrInsufficientResources}, {"1g.10gb", nil, gpu.ErrInsufficientResources}}},
		{"one +me", []step{{"1g.10gb+me", nil, nil}, {"1g.10gb+me", nil, gpu.ErrInsufficientResources}, {"1g.10gb", nil, nil}}},
		{"three 2g and a 1g", []step{{"2g.20gb", nil, nil}, {"2g.20gb", nil, nil}, {"2g.20gb", nil, nil}, {"1g.10gb", nil, nil}, {"1g.10gb", nil, gpu.ErrInsufficientResources}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := migBackend(t)
			for i, s := range tt.steps {
				gi, err := b.CreateGPUInstance(ctx, 0, s.profile, s.placement)
				if s.wantErr == nil && err != nil || s.wantErr != nil && !errors.Is(err, s.wantErr) {
					t.Fatalf("step %d (%s at %v): %+v, %v; want err %v", i, s.profile, s.placement, gi, err, s.wantErr)
				}
				if s.placement != nil && err == nil && gi.Placement != *s.placement {
					t.Errorf("step %d: placement %+v, asked %+v", i, gi.Placement, *s.placement)
				}
			}
		})
	}
}

// TestMIGPlacementsNeverOverlap creates and destroys instances at random
// and checks after every step that no two instances share a memory slice
// and that no more compute slices are used than the GPU has.
func TestMIGPlacementsNeverOverlap(t *testing.T) {
	ctx := context.Background()
	for _, profile := range []string{"dgxa100", "dgxh100"} {
		t.Run(profile, func(t *testing.T) {
			b, _ := newTestBackend(t, profile)
			if err := b.SetMIGMode(ctx, 0, true); err != nil {
				t.Fatal(err)
			}
			profs, err := b.MIGProfiles(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			slices := map[string]int{}
			for _, p := range profs {
				slices[p.Name] = p.SliceCount
			}
			rng := rand.New(rand.NewPCG(1, 2))
			created, refused := 0, 0
			for step := range 2000 {
				gis, err := b.GPUInstances(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(gis) > 0 && rng.IntN(3) == 0 {
					gi := gis[rng.IntN(len(gis))]
					if err := b.DestroyGPUInstance(ctx, 0, gi.ID); err != nil {
						t.Fatalf("step %d: destroy %d: %v", step, gi.ID, err)
					}
					continue
				}
				p := profs[rng.IntN(len(profs))]
				var pl *gpu.Placement
				if rng.IntN(2) == 0 {
					pl = &p.Placements[rng.IntN(len(p.Placements))]
				}
				switch _, err := b.CreateGPUInstance(ctx, 0, p.Name, pl); {
				case err == nil:
					created++
				case errors.Is(err, gpu.ErrInsufficientResources):
					refused++
				default:
					t.Fatalf("step %d: create %s: %v", step, p.Name, err)
				}
				gis, _ = b.GPUInstances(ctx, 0)
				used := 0
				for i, a := range gis {
					used += slices[a.Profile]
					for _, c := range gis[i+1:] {
						if a.Placement.Overlaps(c.Placement) {
							t.Fatalf("step %d: %+v overlaps %+v", step, a, c)
						}
					}
				}
				if used > 7 {
					t.Fatalf("step %d: %d compute slices in use: %+v", step, used, gis)
				}
			}
			if created < 100 || refused < 100 {
				t.Errorf("random walk too one-sided: %d created, %d refused", created, refused)
			}
		})
	}
}

// TestEveryProfileGetsADevice creates each GPU-instance profile alone on a
// GPU of every built-in node, with a full-size compute instance in it: the
// MIG device a user gets from that profile. go-nvml's A100 table lists no
// compute-instance placements, which must not make its GPUs unusable.
func TestEveryProfileGetsADevice(t *testing.T) {
	ctx := context.Background()
	for _, node := range []string{"dgxa100", "dgxh100", "dgxh200", "dgxb200"} {
		t.Run(node, func(t *testing.T) {
			b, _ := newTestBackend(t, node)
			if err := b.SetMIGMode(ctx, 0, true); err != nil {
				t.Fatal(err)
			}
			profs, err := b.MIGProfiles(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range profs {
				gi, err := b.CreateGPUInstance(ctx, 0, p.Name, nil)
				if err != nil {
					t.Fatalf("%s: creating the GPU instance: %v", p.Name, err)
				}
				ci, err := b.CreateComputeInstance(ctx, 0, gi.ID, "")
				if err != nil {
					t.Fatalf("%s: creating its full-size compute instance: %v", p.Name, err)
				}
				if ci.Profile != p.Name {
					t.Errorf("%s: compute instance profile %q, want the GPU instance's own", p.Name, ci.Profile)
				}
				if err := b.DestroyComputeInstance(ctx, 0, gi.ID, ci.ID); err != nil {
					t.Fatal(err)
				}
				if err := b.DestroyGPUInstance(ctx, 0, gi.ID); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestComputeInstances(t *testing.T) {
	ctx := context.Background()
	b := migBackend(t)
	gi, err := b.CreateGPUInstance(ctx, 0, "3g.40gb", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		profile string
		wantErr error
		want    string
	}{
		{"first 1c", "1c.3g.40gb", nil, "1c.3g.40gb"},
		{"second 1c", "1c.3g.40gb", nil, "1c.3g.40gb"},
		{"2c does not fit", "2c.3g.40gb", gpu.ErrInsufficientResources, ""},
		{"third 1c", "1c.3g.40gb", nil, "1c.3g.40gb"},
		{"fourth 1c", "1c.3g.40gb", gpu.ErrInsufficientResources, ""},
		{"unknown", "5c.3g.40gb", gpu.ErrNotFound, ""},
	}
	uuids := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ci, err := b.CreateComputeInstance(ctx, 0, gi.ID, tt.profile)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || ci.Profile != tt.want || ci.GPUInstanceID != gi.ID || uuids[ci.UUID] {
				t.Fatalf("ci = %+v, %v", ci, err)
			}
			uuids[ci.UUID] = true
		})
	}
	devs, _ := b.Devices(ctx)
	if n := len(devs[0].MIGDevices); n != 3 {
		t.Fatalf("%d MIG devices, want 3", n)
	}
	for _, m := range devs[0].MIGDevices {
		if m.Profile != "1c.3g.40gb" || m.GPUSlices != 3 || m.ComputeSlices != 1 || m.MultiprocessorCount != 16 || m.MemoryMiB != 40960 {
			t.Errorf("MIG device = %+v", m)
		}
	}
	if err := b.DestroyGPUInstance(ctx, 0, gi.ID); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("destroy GI with CIs: %v, want ErrInUse", err)
	}
	if err := b.DestroyComputeInstance(ctx, 0, gi.ID, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.DestroyComputeInstance(ctx, 0, gi.ID, 1); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("destroy twice: %v, want ErrNotFound", err)
	}
	ci, err := b.CreateComputeInstance(ctx, 0, gi.ID, "")
	if !errors.Is(err, gpu.ErrInsufficientResources) {
		t.Errorf("full-size CI beside two 1c: %+v, %v", ci, err)
	}
	if _, err := b.CreateComputeInstance(ctx, 0, 99, ""); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("CI in missing GI: %v", err)
	}
}

func TestMIGDeviceUUIDsAreStable(t *testing.T) {
	ctx := context.Background()
	layout := func(b *Backend, order []string) map[string]string {
		for _, p := range order {
			gi, err := b.CreateGPUInstance(ctx, 0, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.CreateComputeInstance(ctx, 0, gi.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
		devs, _ := b.Devices(ctx)
		out := map[string]string{}
		for _, m := range devs[0].MIGDevices {
			out[m.UUID] = m.Profile
		}
		return out
	}
	a := layout(migBackend(t), []string{"4g.40gb", "2g.20gb", "1g.10gb"})
	again := layout(migBackend(t), []string{"4g.40gb", "2g.20gb", "1g.10gb"})
	if len(a) != 3 || len(again) != 3 {
		t.Fatalf("layouts: %v, %v", a, again)
	}
	for u, p := range a {
		if again[u] != p {
			t.Errorf("MIG device %s (%s) missing after restart: %v", u, p, again)
		}
	}
}

func TestSetMIGMode(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		needsReset  bool
		busy        bool
		wantCurrent bool
	}{
		{"idle GPU applies at once", false, false, true},
		{"busy GPU waits for reset", false, true, false},
		{"reset required by option", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := Builtin("dgxh100")
			b, err := New(p, Options{MIGModeNeedsReset: tt.needsReset, Clock: NewManualClock(t0)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if tt.busy {
				if err := b.RunProcess(2, Proc{PID: 10, MemMiB: 100, Util: 50}); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.SetMIGMode(ctx, 2, true); err != nil {
				t.Fatal(err)
			}
			devs, _ := b.Devices(ctx)
			if m := devs[2].MIG; m.Current != tt.wantCurrent || !m.Pending {
				t.Errorf("after SetMIGMode: %+v, want current %v pending true", m, tt.wantCurrent)
			}
			if !tt.wantCurrent {
				if _, err := b.CreateGPUInstance(ctx, 2, "1g.10gb", nil); !errors.Is(err, gpu.ErrNotSupported) {
					t.Errorf("GI before reset: %v, want ErrNotSupported", err)
				}
				if tt.busy {
					if err := b.Reset(2); !errors.Is(err, gpu.ErrInUse) {
						t.Errorf("Reset of busy GPU: %v, want ErrInUse", err)
					}
					if err := b.StopProcess(10); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.Reset(2); err != nil {
					t.Fatal(err)
				}
			}
			devs, _ = b.Devices(ctx)
			if m := devs[2].MIG; !m.Current || !m.Pending {
				t.Errorf("after reset: %+v", m)
			}
			if devs[3].MIG.Pending {
				t.Error("GPU 3 changed")
			}
		})
	}
}

func TestMIGModeErrors(t *testing.T) {
	ctx := context.Background()
	b := migBackend(t)
	if _, err := b.CreateGPUInstance(ctx, 0, "1g.10gb", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMIGMode(ctx, 0, false); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("disable with instances: %v, want ErrInUse", err)
	}
	if _, err := b.CreateGPUInstance(ctx, 1, "1g.10gb", nil); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("GI with MIG off: %v, want ErrNotSupported", err)
	}
	if err := b.Reset(0); err != nil {
		t.Fatal(err)
	}
	if gis, _ := b.GPUInstances(ctx, 0); len(gis) != 0 {
		t.Errorf("instances survive reset: %+v", gis)
	}
	if err := b.SetMIGMode(ctx, 0, false); err != nil {
		t.Errorf("disable after reset: %v", err)
	}

	t4, err := Parse(strings.NewReader("gpus: [{model: T4}]"), "t4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nb, err := New(t4, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	calls := map[string]error{}
	calls["SetMIGMode"] = nb.SetMIGMode(ctx, 0, true)
	_, calls["MIGProfiles"] = nb.MIGProfiles(ctx, 0)
	_, calls["CreateGPUInstance"] = nb.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
	_, calls["GPUInstances"] = nb.GPUInstances(ctx, 0)
	for name, err := range calls {
		if !errors.Is(err, gpu.ErrNotSupported) || !strings.Contains(err.Error(), "Tesla T4") {
			t.Errorf("%s on T4: %v, want ErrNotSupported naming the GPU", name, err)
		}
	}
}
