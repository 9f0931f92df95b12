package v1

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuarantineConfig(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		cfg, err := Load(strings.NewReader("version: v1\n"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		q := cfg.Health.Quarantine
		if q.Disabled || q.Window.Duration != DefaultQuarantineWindow || q.Validation.Duration != DefaultQuarantineValidation ||
			q.EvictionTimeout.Duration != DefaultQuarantineEvictionTimeout || q.RetryHeldAfter.Duration != DefaultQuarantineRetryHeldAfter {
			t.Fatalf("defaults = %+v", q)
		}
		classes := q.EffectiveClasses()
		if len(classes) != len(DefaultQuarantineClasses()) || classes[0].Name != "bus" || !classes[0].NodeWide() || !classes[0].DoesReset() || !classes[0].DoesEvict() {
			t.Fatalf("classes = %+v", classes)
		}
	})
	t.Run("merged over the defaults", func(t *testing.T) {
		cfg, err := Load(strings.NewReader(`version: v1
health:
  quarantine:
    window: 10m
    classes:
    - name: nvlink-fabric
      xids: [74, 79]
      scope: node
      reset: false
    - name: gsp
      xids: [119]
`), Options{})
		if err != nil {
			t.Fatal(err)
		}
		q := cfg.Health.Quarantine
		if q.Window.Duration != 10*time.Minute {
			t.Errorf("window = %s", q.Window.Duration)
		}
		byName := map[string]QuarantineClass{}
		for _, c := range q.EffectiveClasses() {
			byName[c.Name] = c
		}
		if _, ok := byName["bus"]; ok {
			t.Error("the bus class kept XID 79, which nvlink-fabric took: want it dropped as empty")
		}
		if _, ok := byName["nvlink"]; ok {
			t.Error("the nvlink class kept XID 74")
		}
		if c := byName["nvlink-fabric"]; !c.NodeWide() || c.DoesReset() || !c.DoesEvict() {
			t.Errorf("nvlink-fabric = %+v", c)
		}
		if c := byName["gsp"]; !slices.Equal(c.XIDs, []uint64{119}) || c.Scope != ScopeGPU {
			t.Errorf("gsp replaced = %+v", c)
		}
		if _, ok := byName["other"]; !ok {
			t.Error("the catch-all class is gone")
		}
	})
	bad := []struct{ name, in, want string }{
		{"unknown field", "evict: true", "health.quarantine.evict: unknown field"},
		{"unknown class field", "classes:\n    - name: a\n      xid: [79]", "health.quarantine.classes[0].xid: unknown field"},
		{"bad scope", "classes:\n    - name: a\n      xids: [79]\n      scope: rack", `health.quarantine.classes[0].scope: unknown value "rack" (allowed: gpu, node)`},
		{"xid in two classes", "classes:\n    - name: a\n      xids: [79]\n    - name: b\n      xids: [48, 79]", "health.quarantine.classes[1].xids[1]: XID 79 is also in classes[0]"},
		{"two catch-alls", "classes:\n    - name: a\n    - name: b", "health.quarantine.classes[1].xids: empty, but classes[0] is already the catch-all"},
		{"bad name", "classes:\n    - name: Bus_Errors\n      xids: [79]", "health.quarantine.classes[0].name"},
		{"duplicate name", "classes:\n    - name: a\n      xids: [1]\n    - name: a\n      xids: [2]", `health.quarantine.classes[1].name: "a" is also the name of classes[0]`},
		{"zero xid", "classes:\n    - name: a\n      xids: [0]", "health.quarantine.classes[0].xids[0]: 0 is not an XID"},
		{"zero eviction timeout", "evictionTimeout: 0s", "health.quarantine.evictionTimeout: must be 1s to"},
		{"validation longer than its timeout", "validation: 10m\n    validationTimeout: 1m", "health.quarantine.validationTimeout: 1m0s is shorter than validation"},
		{"not a duration", "window: soon", "health.quarantine.window"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(strings.NewReader("version: v1\nhealth:\n  quarantine:\n    "+tc.in+"\n"), Options{})
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}
