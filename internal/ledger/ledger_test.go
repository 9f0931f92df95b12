package ledger

import (
	"errors"
	"testing"
	"time"
)

func TestLedger(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New()
	l.now = func() time.Time { return now }
	ch, stop := l.Changes()
	defer stop()
	changed := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	t.Run("claim holds, another claim is refused", func(t *testing.T) {
		if err := l.HoldForClaim("c1", []string{"GPU-a", "GPU-b"}); err != nil {
			t.Fatal(err)
		}
		if !changed() {
			t.Error("no change announced")
		}
		if err := l.HoldForClaim("c1", []string{"GPU-a"}); err != nil {
			t.Errorf("holding again for the same claim: %v", err)
		}
		err := l.HoldForClaim("c2", []string{"GPU-c", "GPU-b"})
		if !errors.Is(err, ErrHeld) {
			t.Fatalf("second claim on GPU-b: %v, want ErrHeld", err)
		}
		if _, ok := l.ClaimHolder("GPU-c"); ok {
			t.Error("a refused hold kept GPU-c")
		}
	})
	t.Run("plugin allocate of a claimed device is refused", func(t *testing.T) {
		if err := l.Allocated([]string{"GPU-a"}); !errors.Is(err, ErrHeld) {
			t.Fatalf("Allocated(GPU-a) = %v, want ErrHeld", err)
		}
		if err := l.Allocated([]string{"GPU-d"}); err != nil {
			t.Fatal(err)
		}
		if !l.PluginHeld("GPU-d") {
			t.Error("GPU-d not plugin-held after Allocate")
		}
		if err := l.HoldForClaim("c3", []string{"GPU-d"}); !errors.Is(err, ErrHeld) {
			t.Fatalf("claim on a plugin-held GPU: %v, want ErrHeld", err)
		}
	})
	t.Run("allocate expires unless PodResources lists it", func(t *testing.T) {
		now = now.Add(allocateGrace + time.Second)
		l.SetPluginHeld(nil)
		if l.PluginHeld("GPU-d") {
			t.Error("GPU-d still plugin-held after the grace with no pod holding it")
		}
		l.SetPluginHeld([]string{"GPU-e"})
		if !changed() || !l.PluginHeld("GPU-e") {
			t.Error("PodResources' GPU-e not recorded")
		}
	})
	t.Run("a MIG claim keeps its GPU from the plugin", func(t *testing.T) {
		if err := l.Hold("m1", []Hold{{Device: "MIG-1", GPU: "GPU-m"}}); err != nil {
			t.Fatal(err)
		}
		if c, ok := l.ClaimHolder("GPU-m"); !ok || c != "m1" {
			t.Errorf("ClaimHolder(GPU-m) = %q, %v", c, ok)
		}
		if err := l.Allocated([]string{"GPU-m"}); !errors.Is(err, ErrHeld) {
			t.Errorf("Allocated(GPU-m) = %v, want ErrHeld", err)
		}
		if err := l.Hold("m2", []Hold{{Device: "MIG-2", GPU: "GPU-e"}}); !errors.Is(err, ErrHeld) {
			t.Errorf("MIG claim on a plugin-held GPU: %v, want ErrHeld", err)
		}
		l.ReleaseClaim("m1")
		if _, ok := l.ClaimHolder("GPU-m"); ok {
			t.Error("GPU-m still claimed after release")
		}
	})
	t.Run("release frees", func(t *testing.T) {
		l.ReleaseClaim("c1")
		if got := l.Claimed(); len(got) != 0 {
			t.Errorf("Claimed() = %v after release", got)
		}
		if err := l.Allocated([]string{"GPU-a"}); err != nil {
			t.Errorf("Allocate after release: %v", err)
		}
	})
}

func TestShares(t *testing.T) {
	const gib = int64(1) << 30
	tests := []struct {
		name    string
		holds   map[string]Hold // by claim, in order of the claim names
		plugin  bool
		refused string // the claim refused, if any
	}{
		{name: "two shares fit", holds: map[string]Hold{"a": {Device: "G", Share: 20 * gib, Of: 80 * gib}, "b": {Device: "G", Share: 60 * gib, Of: 80 * gib}}},
		{name: "a share too many", holds: map[string]Hold{"a": {Device: "G", Share: 50 * gib, Of: 80 * gib}, "b": {Device: "G", Share: 40 * gib, Of: 80 * gib}}, refused: "b"},
		{name: "whole after a share", holds: map[string]Hold{"a": {Device: "G", Share: 1 * gib, Of: 80 * gib}, "b": {Device: "G"}}, refused: "b"},
		{name: "share after whole", holds: map[string]Hold{"a": {Device: "G"}, "b": {Device: "G", Share: 1 * gib, Of: 80 * gib}}, refused: "b"},
		{name: "share of a plugin-held GPU", holds: map[string]Hold{"a": {Device: "G", Share: 1 * gib, Of: 80 * gib}}, plugin: true, refused: "a"},
		{name: "share larger than the GPU", holds: map[string]Hold{"a": {Device: "G", Share: 90 * gib, Of: 80 * gib}}, refused: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New()
			if tt.plugin {
				l.SetPluginHeld([]string{"G"})
			}
			for _, c := range []string{"a", "b"} {
				h, ok := tt.holds[c]
				if !ok {
					continue
				}
				err := l.Hold(c, []Hold{h})
				if (err != nil) != (c == tt.refused) {
					t.Fatalf("claim %s: err = %v, refused want %v", c, err, c == tt.refused)
				}
			}
			if tt.refused == "" {
				if _, held := l.ClaimHolder("G"); !held {
					t.Error("a GPU held by shares has no claim holder")
				}
				if err := l.Allocated([]string{"G"}); err == nil {
					t.Error("the plugin could allocate a GPU held by shares")
				}
				l.ReleaseClaim("a")
				l.ReleaseClaim("b")
				if len(l.Shares("G")) != 0 || len(l.Claimed()) != 0 {
					t.Errorf("after release: shares %v, claimed %v", l.Shares("G"), l.Claimed())
				}
			}
		})
	}
}

func TestClaimsOn(t *testing.T) {
	l := New()
	if err := l.Hold("whole", []Hold{{Device: "GPU-a"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold("mig1", []Hold{{Device: "MIG-1", GPU: "GPU-b"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold("mig2", []Hold{{Device: "GPU-b/mig-0-1", GPU: "GPU-b"}, {Device: "MIG-3", GPU: "GPU-c"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, gpu string
		want      []string
	}{
		{"a GPU held whole", "GPU-a", []string{"whole"}},
		{"MIG devices of two claims, one not created yet", "GPU-b", []string{"mig1", "mig2"}},
		{"one MIG device", "GPU-c", []string{"mig2"}},
		{"a free GPU", "GPU-d", []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := l.ClaimsOn(tc.gpu)
			if len(got) != len(tc.want) {
				t.Fatalf("ClaimsOn(%s) = %v, want %v", tc.gpu, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("ClaimsOn(%s) = %v, want %v", tc.gpu, got, tc.want)
				}
			}
		})
	}
	l.ReleaseClaim("mig2")
	if got := l.ClaimsOn("GPU-b"); len(got) != 1 || got[0] != "mig1" {
		t.Errorf("after releasing mig2: %v", got)
	}
}
