package agent

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
)

// TestFlagPrecedence runs the agent's own flag parsing and checks that a
// flag beats the environment, which beats the file.
func TestFlagPrecedence(t *testing.T) {
	const file = "version: v1\nflags:\n  migStrategy: single\n  plugin:\n    deviceIDStrategy: index\n    deviceListStrategy: volume-mounts\n"
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c *configv1.Config)
	}{
		{"file only", nil, nil, func(t *testing.T, c *configv1.Config) {
			if c.MIGStrategy() != "single" || c.DeviceIDStrategy() != "index" {
				t.Errorf("mig %s id %s", c.MIGStrategy(), c.DeviceIDStrategy())
			}
		}},
		{"env over file", nil, map[string]string{configv1.EnvMIGStrategy: "mixed"}, func(t *testing.T, c *configv1.Config) {
			if c.MIGStrategy() != "mixed" {
				t.Errorf("mig %s, want mixed", c.MIGStrategy())
			}
		}},
		{"flag over env", []string{"--mig-strategy=none"}, map[string]string{configv1.EnvMIGStrategy: "mixed"}, func(t *testing.T, c *configv1.Config) {
			if c.MIGStrategy() != "none" {
				t.Errorf("mig %s, want none", c.MIGStrategy())
			}
		}},
		{"list flag", []string{"--device-list-strategy=envvar,cdi-cri", "--pass-device-specs"}, nil, func(t *testing.T, c *configv1.Config) {
			if got := strings.Join(c.DeviceListStrategies(), ","); got != "envvar,cdi-cri" || !c.PassDeviceSpecs() {
				t.Errorf("list %s specs %v", got, c.PassDeviceSpecs())
			}
		}},
		{"unset flags leave the file alone", []string{"--log-level=debug"}, nil, func(t *testing.T, c *configv1.Config) {
			if got := strings.Join(c.DeviceListStrategies(), ","); got != "volume-mounts" {
				t.Errorf("list %s, want the file's volume-mounts", got)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &runFlags{}
			fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
			f.add(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			env, err := configv1.OverridesFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := configv1.Load(strings.NewReader(file), configv1.Options{Overrides: f.overrides().Over(env)})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg)
		})
	}
}
