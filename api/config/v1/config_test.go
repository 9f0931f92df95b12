package v1

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// seedConfig returns the single config document a ConfigMap in testdata
// carries, byte for byte.
func seedConfig(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatalf("reading ConfigMap %s: %v", file, err)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("ConfigMap %s: want one key in data, got %d", file, len(cm.Data))
	}
	for _, v := range cm.Data {
		return v
	}
	return ""
}

func TestLoadSeeds(t *testing.T) {
	t.Run("time-slicing ConfigMap", func(t *testing.T) {
		cfg, err := Load(strings.NewReader(seedConfig(t, "seed-time-slicing-configmap.yaml")), Options{})
		if err != nil {
			t.Fatal(err)
		}
		ts := cfg.Sharing.TimeSlicing
		if ts.RenameByDefault || len(ts.Resources) != 1 || ts.Resources[0].Name != DefaultResourceName || ts.Resources[0].Replicas != 4 {
			t.Fatalf("timeSlicing = %+v, want nvidia.com/gpu x4 without rename", ts)
		}
		if !ts.Resources[0].Devices.Selects(7, "7", "GPU-x") {
			t.Error("default devices should select every GPU")
		}
		if cfg.MIGStrategy() != MIGStrategyNone {
			t.Errorf("migStrategy = %q, want none", cfg.MIGStrategy())
		}
	})
	t.Run("MIG ConfigMap with the sharing.mig alias", func(t *testing.T) {
		var logs bytes.Buffer
		cfg, err := Load(strings.NewReader(seedConfig(t, "seed-mig-configmap.yaml")), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MIGStrategy() != MIGStrategySingle {
			t.Errorf("migStrategy = %q, want single", cfg.MIGStrategy())
		}
		if !strings.Contains(logs.String(), "sharing.mig.strategy") {
			t.Errorf("want a log note about the alias, got %q", logs.String())
		}
	})
	t.Run("NVIDIA's full format", func(t *testing.T) {
		f, err := os.Open("testdata/nvidia-full.yaml")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cfg, err := Load(f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.DeviceListStrategies(); len(got) != 2 || got[1] != DeviceListStrategyCDIAnnotations {
			t.Errorf("deviceListStrategy = %v", got)
		}
		if cfg.DeviceIDStrategy() != DeviceIDStrategyIndex || !cfg.PassDeviceSpecs() {
			t.Errorf("plugin flags not read: %+v", cfg.Flags.Plugin)
		}
		if cfg.Flags.GFD.SleepInterval.Duration != time.Minute {
			t.Errorf("gfd.sleepInterval = %v", cfg.Flags.GFD.SleepInterval)
		}
		if cfg.Resources.GPUs[0].Name != "a100" || cfg.Resources.MIGs[0].Pattern != "1g.10gb" {
			t.Errorf("resources = %+v", cfg.Resources)
		}
	})
}

func TestLoadDefaults(t *testing.T) {
	cfg, err := Load(strings.NewReader("version: v1\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"migStrategy", cfg.MIGStrategy(), MIGStrategyNone},
		{"failOnInitError", cfg.FailOnInitError(), true},
		{"passDeviceSpecs", cfg.PassDeviceSpecs(), false},
		{"deviceIDStrategy", cfg.DeviceIDStrategy(), DeviceIDStrategyUUID},
		{"deviceListStrategy", strings.Join(cfg.DeviceListStrategies(), ","), DeviceListStrategyEnvVar},
		{"allocationPolicy", cfg.Sharing.AllocationPolicy, AllocationDistributed},
		{"probation", cfg.Health.Probation.Duration, DefaultProbation},
		{"cdiAnnotationPrefix", cfg.CDIAnnotationPrefix(), DefaultCDIAnnotationPrefix},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
}

func TestLoadExtensions(t *testing.T) {
	in := `version: v1
sharing:
  allocationPolicy: packed
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      devices: [0, 1]
      replicas: 4
    - name: nvidia.com/gpu
      devices: ["2", "GPU-abc"]
      replicas: 8
  mps:
    renameByDefault: true
    resources:
    - name: gpu
      devices: [3]
      replicas: 2
health:
  probation: 30s
  ignoredXIDs: [94]
`
	cfg, err := Load(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sharing.AllocationPolicy != AllocationPacked {
		t.Errorf("allocationPolicy = %q", cfg.Sharing.AllocationPolicy)
	}
	if r := cfg.Sharing.TimeSlicing.Resources[1]; r.Replicas != 8 || !r.Devices.Selects(0, "5", "gpu-ABC") || r.Devices.Selects(0, "0", "GPU-x") {
		t.Errorf("second entry = %+v", r)
	}
	if cfg.Health.Probation.Duration != 30*time.Second || cfg.Health.IgnoredXIDs[0] != 94 {
		t.Errorf("health = %+v", cfg.Health)
	}
}

func TestPrecedence(t *testing.T) {
	file := "version: v1\nflags:\n  migStrategy: single\n  plugin:\n    deviceIDStrategy: index\n    passDeviceSpecs: false\n"
	env, err := OverridesFromEnv(func(k string) (string, bool) {
		v, ok := map[string]string{EnvMIGStrategy: "mixed", EnvPassDeviceSpecs: "true", EnvDeviceListStrategy: "envvar, cdi-cri"}[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	none := MIGStrategyNone
	flags := Overrides{MIGStrategy: &none}
	cfg, err := Load(strings.NewReader(file), Options{Overrides: flags.Over(env)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"flag beats env and file", cfg.MIGStrategy(), MIGStrategyNone},
		{"env beats file", cfg.PassDeviceSpecs(), true},
		{"env list", strings.Join(cfg.DeviceListStrategies(), ","), "envvar,cdi-cri"},
		{"file beats default", cfg.DeviceIDStrategy(), DeviceIDStrategyIndex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
	t.Run("bad env value", func(t *testing.T) {
		_, err := OverridesFromEnv(func(k string) (string, bool) { return "maybe", k == EnvFailOnInitError })
		if err == nil || !strings.Contains(err.Error(), EnvFailOnInitError) {
			t.Fatalf("got %v, want an error naming %s", err, EnvFailOnInitError)
		}
	})
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"missing version", "flags: {}\n", []string{"version", "v1"}},
		{"unknown version", "version: v2\n", []string{"version", `"v2"`}},
		{"typo with suggestion", "version: v1\nflags:\n  migStrategey: single\n", []string{"flags.migStrategey", `did you mean "migStrategy"`}},
		{"nested typo", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replica: 2\n", []string{"sharing.timeSlicing.resources[0].replica", `"replicas"`}},
		{"unknown field far from any", "version: v1\nbanana: 1\n", []string{`unknown field "banana"`, "allowed:"}},
		{"bad mig strategy", "version: v1\nflags:\n  migStrategy: some\n", []string{"flags.migStrategy", `"some"`, "none, single, mixed"}},
		{"bad type", "version: v1\nflags:\n  failOnInitError: maybe\n", []string{"flags.failOnInitError", "true or false", `"maybe"`}},
		{"bad list strategy", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, files]\n", []string{"deviceListStrategy[1]", `"files"`, "cdi-cri"}},
		{"bad id strategy", "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n", []string{"deviceIDStrategy", "uuid, index"}},
		{"replicas 0", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n", []string{"sharing.timeSlicing.resources[0].replicas", "must be >= 1 and at most 1000", "got 0"}},
		{"a million replicas", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1000000\n", []string{"sharing.timeSlicing.resources[0].replicas", "at most 1000", "got 1000000"}},
		{"replicas beyond int32", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4000000000\n", []string{"sharing.mps.resources[0].replicas", "at most 1000"}},
		{"too large", "version: v1\n" + strings.Repeat("# padding\n", MaxBytes/10+1), []string{"more than 1048576 bytes"}},
		{"unknown resource", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/tpu\n      replicas: 2\n", []string{"resources[0].name", `unknown resource "nvidia.com/tpu"`}},
		{"MIG resource without mixed", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n", []string{"MIG resource", "mixed"}},
		{"MPS with MIG", "version: v1\nflags:\n  migStrategy: single\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", []string{"sharing.mps", "MIG", "migStrategy"}},
		{"MPS and time-slicing on the same GPUs", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", []string{"one sharing mode", "disjoint"}},
		{"overlapping per-GPU entries", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      devices: [0, 1]\n      replicas: 2\n    - name: nvidia.com/gpu\n      devices: [1]\n      replicas: 4\n", []string{"resources[0] and [1]", "disjoint"}},
		{"alias contradicts flag", "version: v1\nsharing:\n  mig:\n    strategy: mixed\nflags:\n  migStrategy: single\n", []string{"sharing.mig.strategy", "contradicts", "flags.migStrategy"}},
		{"alias extra field", "version: v1\nsharing:\n  mig:\n    strategy: mixed\n    mode: x\n", []string{"sharing.mig.mode"}},
		{"bad devices", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      devices: some\n      replicas: 2\n", []string{"devices", `"some"`}},
		{"bad policy", "version: v1\nsharing:\n  allocationPolicy: spread\n", []string{"sharing.allocationPolicy", "distributed, packed"}},
		{"bad probation", "version: v1\nhealth:\n  probation: soon\n", []string{"health.probation", "duration"}},
		{"not a mapping", "- a\n- b\n", []string{"mapping"}},
		{"bad rename", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      rename: example.com/gpu\n      replicas: 2\n", []string{"rename", "nvidia.com domain"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(strings.NewReader(tc.in), Options{})
			if err == nil {
				t.Fatal("want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
