package dra

import (
	"errors"
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/ledger"
)

// shareClaim is a claim allocated a share of device with the given
// consumed capacity.
func shareClaim(uid, device string, memory string, compute int64) *resourceapi.ResourceClaim {
	c := claim(uid, device).obj()
	r := &c.Status.Allocation.Devices.Results[0]
	r.ShareID = ptr.To(types.UID("share-" + uid))
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		apidra.CapacityMemory:  resource.MustParse(memory),
		apidra.CapacityCompute: *resource.NewQuantity(compute, resource.DecimalSI),
	}
	return c
}

func TestSharedGPUsPublished(t *testing.T) {
	d := sharingDriver(t, simBackend(t), t.TempDir(), ledger.New(), &recRunner{}, true)
	published := func() map[string]resourceapi.Device {
		devs := map[string]resourceapi.Device{}
		for _, s := range d.Resources().Pools[testNode].Slices {
			for _, dv := range s.Devices {
				devs[dv.Name] = dv
			}
		}
		return devs
	}
	devs := published()
	g := devs["gpu-2"]
	if g.AllowMultipleAllocations == nil || !*g.AllowMultipleAllocations {
		t.Fatalf("gpu-2 not published for multiple allocations: %+v", g)
	}
	// The GPUs read again (after a MIG change or a GPU reset) are
	// published the same way.
	if err := d.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if g := published()["gpu-2"]; g.AllowMultipleAllocations == nil || !*g.AllowMultipleAllocations || g.Capacity[apidra.CapacityCompute].RequestPolicy == nil {
		t.Fatalf("after Refresh, gpu-2 is not published for consumable capacity: %+v", g)
	}
	mem := g.Capacity[apidra.CapacityMemory]
	if p := mem.RequestPolicy; p == nil || p.Default == nil || p.Default.Cmp(mem.Value) != 0 || p.ValidRange == nil || p.ValidRange.Step.Value() != 1<<30 {
		t.Errorf("memory request policy %+v: want the whole memory by default, in steps of 1Gi", p)
	}
	if c := g.Capacity[apidra.CapacityCompute]; c.Value.Value() != 100 || c.RequestPolicy == nil || c.RequestPolicy.Default.Value() != 0 {
		t.Errorf("compute capacity %+v: want 100 percent, none by default", c)
	}
	for name, dv := range devs {
		if strings.Contains(name, "-mig-") && dv.AllowMultipleAllocations != nil {
			t.Errorf("MIG device %s published for multiple allocations", name)
		}
	}
}

func TestSharedGPUClaims(t *testing.T) {
	dir := t.TempDir()
	l := ledger.New()
	d := sharingDriver(t, simBackend(t), dir, l, &recRunner{}, true)
	uuid := d.inv.byName["gpu-2"].gpu.UUID
	for _, uid := range []string{"a", "b"} {
		if _, err := prepareOne(t, d, shareClaim(uid, "gpu-2", "20Gi", 25)); err != nil {
			t.Fatalf("claim %s: %v", uid, err)
		}
	}
	t.Run("each claim's spec carries its share", func(t *testing.T) {
		data, err := os.ReadFile(cdi.ClaimSpecPath(dir+"/cdi", "a"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"GPUPLANE_GPU_MEMORY_LIMIT_MIB=20480", "GPUPLANE_GPU_FRACTION=0.25", "NVIDIA_VISIBLE_DEVICES=" + uuid} {
			if !strings.Contains(string(data), want) {
				t.Errorf("spec lacks %q:\n%s", want, data)
			}
		}
	})
	t.Run("the ledger records both shares", func(t *testing.T) {
		sh := l.Shares(uuid)
		if len(sh) != 2 || sh["a"] != 20<<30 || sh["b"] != 20<<30 {
			t.Errorf("shares = %v", sh)
		}
	})
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
	}{
		{"a share that does not fit", shareClaim("c", "gpu-2", "50Gi", 0)},
		{"the GPU whole", claim("d", "gpu-2").obj()},
		{"more memory than the GPU has", shareClaim("e", "gpu-3", "100Gi", 0)},
		{"more than all its compute", shareClaim("f", "gpu-3", "1Gi", 120)},
	}
	for _, tt := range tests {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			if _, err := prepareOne(t, d, tt.claim); err == nil {
				t.Fatal("prepared")
			}
			if _, err := os.Stat(cdi.ClaimSpecPath(dir+"/cdi", string(tt.claim.UID))); !os.IsNotExist(err) {
				t.Error("a refused claim left a CDI spec")
			}
		})
	}
	t.Run("the device plugin cannot give the GPU", func(t *testing.T) {
		if err := l.Allocated([]string{uuid}); !errors.Is(err, ledger.ErrHeld) {
			t.Errorf("Allocated = %v, want ErrHeld", err)
		}
	})
	t.Run("shares survive a restart", func(t *testing.T) {
		d.Close()
		l2 := ledger.New()
		d2 := sharingDriver(t, d.o.Backend.(*sim.Backend), dir, l2, &recRunner{}, true)
		if sh := l2.Shares(uuid); len(sh) != 2 {
			t.Errorf("shares after restart = %v", sh)
		}
		unprepareOne(t, d2, "a")
		if sh := l2.Shares(uuid); len(sh) != 1 || sh["b"] != 20<<30 {
			t.Errorf("shares after unprepare = %v", sh)
		}
		if _, err := prepareOne(t, d2, shareClaim("c", "gpu-2", "50Gi", 0)); err != nil {
			t.Errorf("50Gi beside 20Gi after the release: %v", err)
		}
	})
	t.Run("a share of a GPU not published shared is refused", func(t *testing.T) {
		d3 := sharingDriver(t, simBackend(t), t.TempDir(), ledger.New(), &recRunner{}, false)
		if _, err := prepareOne(t, d3, shareClaim("g", "gpu-2", "20Gi", 0)); err == nil || !strings.Contains(err.Error(), "not published for shared allocation") {
			t.Errorf("err = %v", err)
		}
	})
}
