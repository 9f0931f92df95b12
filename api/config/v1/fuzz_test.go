package v1

import (
	"errors"
	"strings"
	"testing"
)

// FuzzLoad feeds the agent's config reader arbitrary bytes: it returns a
// config or an error wrapping ErrInvalid, never panics, and a config it
// returns is within its bounds.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"",
		"version: v1\n",
		"version: v1\nflags:\n  migStrategy: mixed\n",
		"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
		"version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      rename: gpu-mps\n      devices: [0, 1]\n      replicas: 1000000\n",
		"version: v1\nsharing:\n  mig:\n    strategy: single\n",
		"version: v1\nhealth:\n  probation: 30s\n",
		"version: v1\nhealth:\n  quarantine:\n    window: 10m\n    classes:\n    - name: nvlink\n      xids: [74]\n      scope: node\n      reset: false\n",
		"version: v1\nhealth:\n  quarantine:\n    classes:\n    - name: a\n    - name: b\n",
		"{\"version\": \"v1\", \"flags\": {\"plugin\": {\"deviceListStrategy\": [\"envvar\", \"cdi-cri\"]}}}",
		"- a\n- b\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := Load(strings.NewReader(s), Options{})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		for _, rs := range []*ReplicatedResources{&cfg.Sharing.TimeSlicing, &cfg.Sharing.MPS} {
			if len(rs.Resources) > MaxResources {
				t.Fatalf("accepted %d sharing entries", len(rs.Resources))
			}
			for _, r := range rs.Resources {
				if r.Replicas < 1 || r.Replicas > MaxReplicas {
					t.Fatalf("accepted replicas %d", r.Replicas)
				}
			}
		}
	})
}
