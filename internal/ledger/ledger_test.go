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
