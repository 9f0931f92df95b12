package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const migDefaultConfig = "../mig/testdata/mig-parted-config-default.yaml"

func TestMIGApplyCommand(t *testing.T) {
	custom := filepath.Join(t.TempDir(), "custom.yaml")
	if err := os.WriteFile(custom, []byte(`version: v1
mig-configs:
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 8}
  gpu3:
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, []byte("version: v1\nmig-configs:\n  typo:\n    - devices: all\n      mig-enabled: true\n      mig-device: {\"3g.40gb\": 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   string
		jsonDevs int
	}{
		{name: "all-balanced on H100", args: []string{"--simulate", "dgxh100", "--config", migDefaultConfig, "--name", "all-balanced"}, code: 0,
			stdout: []string{"Config all-balanced applied on sim:dgxh100: 8 GPUs change, 0 unchanged.", "mig: 1x3g.40gb, 1x2g.20gb, 2x1g.10gb", "MIG-"}},
		{name: "media extensions on A100, json", args: []string{"--simulate", "dgxa100", "--config", migDefaultConfig, "--name", "all-1g.5gb.me", "-o", "json"}, code: 0, jsonDevs: 8},
		{name: "dry run on B200", args: []string{"--simulate", "dgxb200", "--config", migDefaultConfig, "--name", "all-1g.23gb", "--dry-run"}, code: 0,
			stdout: []string{"would apply (dry run)", "mig: 7x1g.23gb", "-\n"}},
		{name: "one GPU", args: []string{"--simulate", "dgxh100", "--config", custom, "--name", "gpu3"}, code: 0,
			stdout: []string{"1 GPUs change, 7 unchanged", "3    whole GPU  mig: 2x3g.40gb"}},
		{name: "does not fit", args: []string{"--simulate", "dgxh100", "--config", custom, "--name", "too-many"}, code: 1,
			stderr: `mig-configs.too-many[0].mig-devices."1g.10gb": the layout does not fit the GPU: 8 devices asked, the GPU holds at most 7`},
		{name: "unknown field", args: []string{"--simulate", "dgxh100", "--config", typo, "--name", "typo"}, code: 1,
			stderr: "mig-configs.typo[0].mig-device: unknown field"},
		{name: "unknown profile for the model", args: []string{"--simulate", "dgxh100", "--config", migDefaultConfig, "--name", "all-1g.5gb"}, code: 1,
			stderr: `mig-configs.all-1g.5gb[0].mig-devices."1g.5gb": the GPU does not offer this MIG profile`},
		{name: "no simulate", args: []string{"--config", custom, "--name", "gpu3"}, code: 2, stderr: "--simulate: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, append([]string{"mig", "apply"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, errOut)
			}
			if tc.jsonDevs > 0 {
				var res MIGApplyResult
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("not JSON: %v\n%s", err, out)
				}
				if len(res.Devices) != tc.jsonDevs {
					t.Errorf("%d devices, want %d", len(res.Devices), tc.jsonDevs)
				}
				for _, d := range res.Devices {
					if d.Profile != "1g.5gb+me" || d.UUID == "" {
						t.Errorf("device %+v", d)
					}
				}
			}
		})
	}
}
