package mig_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpuplane/gpuplane/internal/mig"
)

// FuzzParse feeds the config parser arbitrary files, seeded with
// mig-parted's default config and small variants: it must never panic,
// and what it accepts must plan on a simulated node without panicking.
func FuzzParse(f *testing.F) {
	def, err := os.ReadFile("testdata/mig-parted-config-default.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(def)
	for _, s := range []string{
		"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n",
		"version: v1\nmig-configs:\n  a:\n    - device-filter: \"0x233010DE\"\n      devices: [0, 3]\n      mig-enabled: true\n      mig-devices: {\"1c.3g.40gb\": 2, \"1g.10gb+me\": 1}\n",
		"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n",
		`{"version":"v1","mig-configs":{"b":[{"devices":[7],"mig-enabled":true,"mig-devices":{}}]}}`,
	} {
		f.Add([]byte(s))
	}
	p, err := newFuzzGPUs()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := mig.ParseBytes(data)
		if err != nil {
			return
		}
		for _, name := range s.Names() {
			if _, err := s.Lookup(name); err != nil {
				t.Fatalf("Lookup(%q) of a listed name: %v", name, err)
			}
			plan, err := mig.NewPlan(s, name, p)
			if err != nil {
				continue
			}
			for _, c := range plan.Changes {
				if c.To.Enabled && len(c.Instances) != c.To.Count() {
					t.Fatalf("config %s: GPU %d: %d instances placed for %d devices", name, c.Index, len(c.Instances), c.To.Count())
				}
			}
		}
	})
}

func newFuzzGPUs() ([]mig.GPU, error) {
	b := newSimNoT("dgxh100")
	defer func() { _ = b.Close() }()
	return mig.GPUs(context.Background(), b)
}
