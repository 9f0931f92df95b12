package agent

import (
	"log/slog"
	"strings"
	"testing"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/quarantine"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// The fan-out reaches every part that is on, and the snapshot whatever
// else is on.
func TestFollowers(t *testing.T) {
	cfg, err := configv1.Load(strings.NewReader("version: v1\nflags:\n  migStrategy: mixed\n"), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs := []*sharing.Resource{{Name: "nvidia.com/gpu", Devices: []sharing.Device{{ID: "GPU-0", UUID: "GPU-0", GPUUUID: "GPU-0"}}}}
	for _, tc := range []struct {
		name string
		on   bool
	}{
		{"the device plugin alone", false},
		{"every follower", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := &servedResources{}
			var (
				mig *migWiring
				lp  *labelsPart
				q   *quarantinePart
			)
			if tc.on {
				mig = &migWiring{gate: newMIGGate(nil)}
				lp = newLabelsPart(nil, nil, nil, slog.New(slog.DiscardHandler))
				q = &quarantinePart{policy: make(chan quarantine.Policy, 1)}
			}
			fo := newFollowers(served, mig, lp, q)
			fo.onResources(rs)
			fo.onConfig(cfg)
			if served.load().Resource("nvidia.com/gpu") == nil {
				t.Error("the served snapshot was not stored")
			}
			if !tc.on {
				return
			}
			if _, ok := mig.gate.gpuOf["GPU-0"]; !ok {
				t.Error("the MIG gate did not learn the served devices")
			}
			if p := mig.strategy.Load(); p == nil || *p != configv1.MIGStrategyMixed {
				t.Errorf("the MIG part's strategy is %v, want mixed", p)
			}
			if len(lp.configs) != 1 {
				t.Error("the labels were not given the config")
			}
			if len(q.policy) != 1 {
				t.Error("the quarantine was not given its policy")
			}
		})
	}
}
