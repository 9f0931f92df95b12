package mig_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/mig"
)

func newSim(t testing.TB, profile string) *sim.Backend {
	t.Helper()
	b := newSimNoT(profile)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// newSimNoT starts a built-in profile; the built-ins always start.
func newSimNoT(profile string) *sim.Backend {
	p, err := sim.Load(profile)
	if err != nil {
		panic(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "node-a"})
	if err != nil {
		panic(err)
	}
	return b
}

func readDefault(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/mig-parted-config-default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func loadDefault(t testing.TB) *mig.Spec {
	t.Helper()
	f, err := os.Open("testdata/mig-parted-config-default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	s, err := mig.Parse(f)
	if err != nil {
		t.Fatalf("mig-parted's default config: %v", err)
	}
	return s
}

// applyPlan applies every change of a plan and returns the node's layouts.
func applyPlan(t *testing.T, b *sim.Backend, p *mig.Plan) {
	t.Helper()
	ctx := context.Background()
	for _, c := range p.Changes {
		if err := mig.ApplyGPU(ctx, b, c.Index, c.To, c.Instances); err != nil {
			t.Fatalf("config %s: applying GPU %d (%s -> %s): %v", p.Config, c.Index, c.From, c.To, err)
		}
	}
	gpus, err := mig.GPUs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if want := p.Targets[g.Index]; !g.Current.Equal(want) {
			t.Fatalf("config %s: GPU %d is %s after applying, want %s", p.Config, g.Index, g.Current, want)
		}
	}
}

// TestDefaultConfigAppliesOnDGX loads mig-parted's default config unchanged
// and applies, on every simulated DGX, each config whose profiles the GPU
// model offers; the others must fail only because the model lacks a
// profile, never because a layout meant for the model does not fit.
func TestDefaultConfigAppliesOnDGX(t *testing.T) {
	spec := loadDefault(t)
	// Configs that must apply on each model: device-filter entries for
	// it, media extensions and all-balanced among them.
	mustApply := map[string][]string{
		"dgxa100": {"all-disabled", "all-enabled", "all-balanced", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb", "all-4g.20gb", "all-7g.40gb", "all-1g.10gb"},
		"dgxh100": {"all-disabled", "all-enabled", "all-balanced", "all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"},
		"dgxh200": {"all-disabled", "all-enabled", "all-balanced", "all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb", "all-3g.71gb", "all-4g.71gb", "all-7g.141gb"},
		"dgxb200": {"all-disabled", "all-enabled", "all-balanced", "all-1g.23gb", "all-1g.23gb.me", "all-1g.45gb", "all-2g.45gb", "all-3g.90gb", "all-4g.90gb", "all-7g.180gb"},
		// NVL72 trays: the configs mig-parted lists for GB200 and GB300
		// (device-filters 0x2941 and 0x31C2) fit their simulated GPUs.
		"gb200-nvl72": {"all-disabled", "all-enabled", "all-balanced", "all-1g.23gb", "all-1g.23gb.me", "all-1g.47gb", "all-2g.47gb", "all-3g.93gb", "all-4g.93gb", "all-7g.186gb"},
		"gb300-nvl72": {"all-disabled", "all-enabled", "all-balanced", "all-1g.35gb", "all-1g.35gb.me", "all-1g.70gb", "all-2g.70gb", "all-3g.139gb", "all-4g.139gb", "all-7g.278gb"},
	}
	for _, model := range []string{"dgxa100", "dgxh100", "dgxh200", "dgxb200", "gb200-nvl72", "gb300-nvl72"} {
		t.Run(model, func(t *testing.T) {
			b := newSim(t, model)
			applied := map[string]bool{}
			for _, name := range spec.Names() {
				gpus, err := mig.GPUs(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				p, err := mig.NewPlan(spec, name, gpus)
				if err != nil {
					if !errors.Is(err, mig.ErrUnknownProfile) {
						t.Errorf("config %s: %v (want it to apply, or fail only for a profile %s lacks)", name, err, gpus[0].Name)
					}
					continue
				}
				applyPlan(t, b, p)
				// Applied means every GPU is in the config's layout, not
				// left out by a device-filter.
				applied[name] = len(p.Unselected) == 0
			}
			for _, name := range mustApply[model] {
				if !applied[name] {
					t.Errorf("config %s did not apply on %s", name, model)
				}
			}
			t.Logf("%s: %d of %d configs apply", model, len(applied), len(spec.Configs))
		})
	}
}

func TestPlanTouchesOnlyChangedGPUs(t *testing.T) {
	b := newSim(t, "dgxh100")
	ctx := context.Background()
	spec, err := mig.ParseBytes([]byte(`version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  one-changed:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := mig.GPUs(ctx, b)
	p, err := mig.NewPlan(spec, "all-1g", gpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 8 {
		t.Fatalf("from whole GPUs: %d changes, want 8", len(p.Changes))
	}
	applyPlan(t, b, p)
	before, _ := b.Devices(ctx)
	gpus, _ = mig.GPUs(ctx, b)
	p, err = mig.NewPlan(spec, "one-changed", gpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 1 || p.Changes[0].Index != 3 || len(p.Unchanged) != 7 {
		t.Fatalf("changes %+v, unchanged %v; want GPU 3 alone", p.Changes, p.Unchanged)
	}
	if got := p.Changes[0].Entry; got != "mig-configs.one-changed[1]" {
		t.Errorf("entry %q", got)
	}
	applyPlan(t, b, p)
	after, _ := b.Devices(ctx)
	for i := range after {
		if i == 3 {
			continue
		}
		if len(after[i].MIGDevices) != len(before[i].MIGDevices) {
			t.Fatalf("GPU %d changed", i)
		}
		for j := range after[i].MIGDevices {
			if after[i].MIGDevices[j].UUID != before[i].MIGDevices[j].UUID {
				t.Errorf("GPU %d: MIG device %d changed UUID", i, j)
			}
		}
	}
	if n := len(after[3].MIGDevices); n != 2 {
		t.Errorf("GPU 3 has %d MIG devices, want 2", n)
	}
}

func TestPlanBadInput(t *testing.T) {
	b := newSim(t, "dgxh100")
	gpus, err := mig.GPUs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config, want string
		is                 error
	}{
		{"unknown profile", `{"1g.5gb": 7}`, `mig-configs.c[0].mig-devices."1g.5gb": the GPU does not offer this MIG profile (it offers 1g.10gb`, mig.ErrUnknownProfile},
		{"too many of a profile", `{"1g.10gb": 8}`, `mig-configs.c[0].mig-devices."1g.10gb": the layout does not fit the GPU: 8 devices asked, the GPU holds at most 7`, mig.ErrDoesNotFit},
		{"too many slices", `{"3g.40gb": 2, "2g.20gb": 1}`, `needs 8 compute slices, the GPU has 7`, mig.ErrDoesNotFit},
		{"no placement", `{"1g.20gb": 4, "1g.10gb": 1}`, `no placement of mig: 1x1g.10gb, 4x1g.20gb`, mig.ErrDoesNotFit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := mig.ParseBytes([]byte("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: " + tc.config + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = mig.NewPlan(spec, "c", gpus)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) || !errors.Is(err, mig.ErrInvalid) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("device that does not exist", func(t *testing.T) {
		spec, _ := mig.ParseBytes([]byte("version: v1\nmig-configs:\n  c:\n    - devices: [0, 9]\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 1}\n"))
		_, err := mig.NewPlan(spec, "c", gpus)
		if err == nil || !strings.Contains(err.Error(), "mig-configs.c[0].devices[1]: the MIG config does not fit this node: GPU 9 does not exist (the node has GPUs 0 to 7)") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("config not in the file", func(t *testing.T) {
		spec, _ := mig.ParseBytes([]byte("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n"))
		_, err := mig.NewPlan(spec, "all-1g.10gb", gpus)
		if !errors.Is(err, mig.ErrUnknownConfig) || !strings.Contains(err.Error(), `no config named "all-1g.10gb"`) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unknown top field", "version: v1\nmig-config: {}\n", "mig-config: unknown field (allowed: version, mig-configs)"},
		{"wrong version", "version: v2\nmig-configs: {}\n", `version: want "v1", got "v2"`},
		{"no version", "mig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "version: missing"},
		{"unknown entry field", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-device: {}\n", "mig-configs.a[0].mig-device: unknown field"},
		{"missing devices", "version: v1\nmig-configs:\n  a:\n    - mig-enabled: false\n", "mig-configs.a[0].devices: missing"},
		{"devices string", "version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n", `mig-configs.a[0].devices: want all or a list of GPU indices, got "some"`},
		{"negative index", "version: v1\nmig-configs:\n  a:\n    - devices: [-1]\n      mig-enabled: false\n", "mig-configs.a[0].devices[0]: want a GPU index from 0 to 63, got -1"},
		{"missing mig-devices", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n", "mig-configs.a[0].mig-devices: missing"},
		{"devices with MIG off", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n", "mig-devices: must be empty when mig-enabled is false"},
		{"bad profile", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g10gb\": 1}\n", `mig-configs.a[0].mig-devices."1g10gb": not a MIG profile name`},
		{"bad count", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 1.5}\n", `mig-configs.a[0].mig-devices."1g.10gb": want a count from 0 to 64, got 1.5`},
		{"all zero", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 0}\n", "every count is 0"},
		{"bad filter", "version: v1\nmig-configs:\n  a:\n    - device-filter: [\"0x2330\"]\n      devices: all\n      mig-enabled: false\n", `mig-configs.a[0].device-filter[0]: "0x2330" is not a PCI device ID`},
		{"empty config", "version: v1\nmig-configs:\n  a: []\n", "mig-configs.a: at least one entry is needed"},
		{"duplicate key", "version: v1\nversion: v1\nmig-configs: {}\n", "not valid YAML"},
		{"not a mapping", "- a\n", "want a mapping with version and mig-configs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mig.ParseBytes([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseFormsOfMigParted(t *testing.T) {
	s, err := mig.ParseBytes([]byte(`version: v1
mig-configs:
  c:
    - device-filter: "0x20B710DE"
      devices: [0, 2]
      mig-enabled: true
      mig-devices: {"1c.3g.40gb": 2, "1g.10gb+me": 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := s.Configs["c"][0]
	if len(e.DeviceFilter) != 1 || e.DeviceFilter[0] != 0x20B710DE || e.AllDevices || len(e.Devices) != 2 || e.Layout.Devices["1c.3g.40gb"] != 2 {
		t.Fatalf("parsed %+v", e)
	}
	if !e.Matches(0x20B710DE) || e.Matches(0x233010DE) || !e.Selects(2) || e.Selects(1) {
		t.Error("matching")
	}
}

// TestRollBackWhenTheDriverRefuses makes the simulated driver refuse a GPU
// instance halfway through a layout: the GPU goes back to its previous
// devices, with the same UUIDs, and the error says why.
func TestRollBackWhenTheDriverRefuses(t *testing.T) {
	b := newSim(t, "dgxa100")
	ctx := context.Background()
	spec := loadDefault(t)
	gpus, _ := mig.GPUs(ctx, b)
	p, err := mig.NewPlan(spec, "all-1g.5gb", gpus)
	if err != nil {
		t.Fatal(err)
	}
	applyPlan(t, b, p)
	before, _ := b.Devices(ctx)
	gpus, _ = mig.GPUs(ctx, b)
	p, err = mig.NewPlan(spec, "all-balanced", gpus)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Changes[0]
	refused := errors.New("injected: insufficient resources")
	// The third instance of the new layout fails.
	calls := 0
	hw := &failNth{Backend: b, n: 3, calls: &calls, err: refused}
	err = mig.ApplyGPU(ctx, hw, c.Index, c.To, c.Instances)
	var rb *mig.RolledBackError
	if !errors.As(err, &rb) || !errors.Is(err, refused) {
		t.Fatalf("got %v, want a roll-back because of the refusal", err)
	}
	if !strings.Contains(err.Error(), "rolled back to mig: 7x1g.5gb") {
		t.Errorf("message %q", err)
	}
	after, _ := b.Devices(ctx)
	if len(after[c.Index].MIGDevices) != 7 {
		t.Fatalf("GPU %d has %d devices after roll-back, want 7", c.Index, len(after[c.Index].MIGDevices))
	}
	for j := range after[c.Index].MIGDevices {
		if after[c.Index].MIGDevices[j].UUID != before[c.Index].MIGDevices[j].UUID {
			t.Errorf("device %d changed UUID in the roll-back", j)
		}
	}
}

// failNth fails the n-th CreateGPUInstance call.
type failNth struct {
	*sim.Backend
	n     int
	calls *int
	err   error
}

func (f *failNth) CreateGPUInstance(ctx context.Context, index int, profile string, pl *gpu.Placement) (gpu.GPUInstance, error) {
	*f.calls++
	if *f.calls == f.n {
		return gpu.GPUInstance{}, f.err
	}
	return f.Backend.CreateGPUInstance(ctx, index, profile, pl)
}

func TestModePendingIsReported(t *testing.T) {
	p, _ := sim.Load("dgxh100")
	b, err := sim.New(p, sim.Options{MIGModeNeedsReset: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	ctx := context.Background()
	spec := loadDefault(t)
	gpus, _ := mig.GPUs(ctx, b)
	plan, err := mig.NewPlan(spec, "all-1g.10gb", gpus)
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Changes[0]
	if err := mig.ApplyGPU(ctx, b, c.Index, c.To, c.Instances); !errors.Is(err, mig.ErrModePending) {
		t.Fatalf("got %v, want ErrModePending", err)
	}
	if err := b.Reset(c.Index); err != nil {
		t.Fatal(err)
	}
	// Level-triggered: planning again from the hardware finishes the job.
	gpus, _ = mig.GPUs(ctx, b)
	plan, _ = mig.NewPlan(spec, "all-1g.10gb", gpus)
	c = plan.Changes[0]
	if err := mig.ApplyGPU(ctx, b, c.Index, c.To, c.Instances); err != nil {
		t.Fatal(err)
	}
}
