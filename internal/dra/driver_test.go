package dra

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/ledger"
)

func TestResources(t *testing.T) {
	d := testDriver(t, simBackend(t), t.TempDir(), nil, nil)
	r := d.Resources()
	pool, ok := r.Pools[testNode]
	if !ok {
		t.Fatalf("no pool %s: %v", testNode, r.Pools)
	}
	devs := map[string]resourceapi.Device{}
	counterSets := map[string]resourceapi.CounterSet{}
	for i, s := range pool.Slices {
		if len(s.Devices) > 0 && len(s.SharedCounters) > 0 {
			t.Errorf("slice %d has devices and counters; the API allows one of them", i)
		}
		if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d has %d devices", i, len(s.Devices))
		}
		for _, dv := range s.Devices {
			if errs := validation.IsDNS1123Label(dv.Name); len(errs) > 0 {
				t.Errorf("device name %q: %v", dv.Name, errs)
			}
			devs[dv.Name] = dv
		}
		for _, c := range s.SharedCounters {
			counterSets[c.Name] = c
		}
	}
	t.Run("whole GPU attributes", func(t *testing.T) {
		g, ok := devs["gpu-2"]
		if !ok {
			t.Fatal("no gpu-2")
		}
		want := map[string]string{
			apidra.AttrType: "gpu", apidra.AttrProductName: "NVIDIA H100 80GB HBM3", apidra.AttrArchitecture: "Hopper",
		}
		for k, v := range want {
			if a := g.Attributes[resourceapi.QualifiedName(k)]; a.StringValue == nil || *a.StringValue != v {
				t.Errorf("%s = %v, want %q", k, a, v)
			}
		}
		for _, k := range []string{apidra.AttrCUDAComputeCapability, apidra.AttrDriverVersion, apidra.AttrCUDADriverVersion} {
			if a := g.Attributes[resourceapi.QualifiedName(k)]; a.VersionValue == nil {
				t.Errorf("%s is not a version: %v", k, a)
			}
		}
		if v := *g.Attributes[apidra.AttrDriverVersion].VersionValue; v != "560.35.3" {
			t.Errorf("driverVersion = %s, want 560.35.3", v)
		}
		for _, k := range []string{apidra.AttrUUID, apidra.AttrPCIeBusID, apidra.AttrPCIeRoot} {
			if a := g.Attributes[resourceapi.QualifiedName(k)]; a.StringValue == nil || *a.StringValue == "" {
				t.Errorf("%s missing", k)
			}
		}
		if q := g.Capacity[apidra.CapacityMemory].Value; q.Value() < 80<<30 {
			t.Errorf("memory = %s", q.String())
		}
		if a, b := devs["gpu-2"].Attributes[apidra.AttrNVLinkDomain], devs["gpu-3"].Attributes[apidra.AttrNVLinkDomain]; *a.IntValue != *b.IntValue {
			t.Errorf("NVLinked gpu-2 and gpu-3 in domains %d and %d", *a.IntValue, *b.IntValue)
		}
	})
	t.Run("MIG devices over counters", func(t *testing.T) {
		if _, ok := devs["gpu-0"]; ok {
			t.Error("a GPU in MIG mode is published whole")
		}
		m, ok := devs["gpu-0-mig-1g-10gb-0-1"]
		if !ok {
			t.Fatalf("no 1g.10gb at 0:1 on GPU 0; devices: %d", len(devs))
		}
		if p := m.Attributes[apidra.AttrMIGProfile]; *p.StringValue != "1g.10gb" {
			t.Errorf("profile = %s", *p.StringValue)
		}
		if len(m.ConsumesCounters) != 1 || m.ConsumesCounters[0].CounterSet != "gpu-0-counters" {
			t.Fatalf("consumes %v", m.ConsumesCounters)
		}
		set, ok := counterSets["gpu-0-counters"]
		if !ok {
			t.Fatal("no counter set for GPU 0")
		}
		for name := range m.ConsumesCounters[0].Counters {
			if _, ok := set.Counters[name]; !ok {
				t.Errorf("device consumes counter %s its set lacks", name)
			}
		}
		full := devs["gpu-0-mig-7g-80gb-0-8"]
		if n := len(full.ConsumesCounters[0].Counters); n != 9 {
			t.Errorf("7g.80gb consumes %d counters, want compute slices and 8 memory slices", n)
		}
	})
}

func TestPrepareWholeGPU(t *testing.T) {
	dir := t.TempDir()
	l := ledger.New()
	d := testDriver(t, simBackend(t), dir, l, nil)
	c := claim("uid-1", "gpu-2", "gpu-3").obj()
	ids, err := prepareOne(t, d, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{cdi.ClaimDeviceID("uid-1", "gpu-2"), cdi.ClaimDeviceID("uid-1", "gpu-3")}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("CDI IDs = %v, want %v", ids, want)
	}
	spec := cdi.ClaimSpecPath(dir+"/cdi", "uid-1")
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	if !bytes.Contains(data, []byte("/dev/nvidia2")) || !bytes.Contains(data, []byte("NVIDIA_VISIBLE_DEVICES=GPU-")) {
		t.Errorf("spec lacks the device or its UUID:\n%s", data)
	}
	if got := l.Claimed(); len(got) != 2 {
		t.Errorf("ledger holds %v, want the two GPUs", got)
	}
	t.Run("idempotent", func(t *testing.T) {
		again, err := prepareOne(t, d, c)
		if err != nil || strings.Join(again, ",") != strings.Join(ids, ",") {
			t.Errorf("second prepare = %v, %v", again, err)
		}
	})
	t.Run("another claim on a held GPU is refused", func(t *testing.T) {
		_, err := prepareOne(t, d, claim("uid-2", "gpu-3").obj())
		if !errors.Is(err, ledger.ErrHeld) {
			t.Fatalf("err = %v, want ErrHeld", err)
		}
		if _, err := os.Stat(cdi.ClaimSpecPath(dir+"/cdi", "uid-2")); !os.IsNotExist(err) {
			t.Error("a refused claim left a CDI spec")
		}
	})
	t.Run("the device plugin cannot allocate it", func(t *testing.T) {
		uuid := *d.inv.byName["gpu-2"].attrs[apidra.AttrUUID].StringValue
		if err := l.Allocated([]string{uuid}); !errors.Is(err, ledger.ErrHeld) {
			t.Errorf("Allocated = %v, want ErrHeld", err)
		}
	})
	unprepareOne(t, d, "uid-1")
	unprepareOne(t, d, "uid-1") // idempotent
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Error("unprepare left the CDI spec")
	}
	if got := l.Claimed(); len(got) != 0 {
		t.Errorf("ledger holds %v after unprepare", got)
	}
}

func TestPrepareDynamicMIG(t *testing.T) {
	dir := t.TempDir()
	b := simBackend(t)
	d := testDriver(t, b, dir, nil, nil)
	c := claim("mig-1", "gpu-1-mig-3g-40gb-4-4").config(resourceapi.AllocationConfigSourceClaim,
		`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`).obj()
	if _, err := prepareOne(t, d, c); err != nil {
		t.Fatal(err)
	}
	gis, err := b.GPUInstances(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(gis) != 1 || gis[0].Profile != "3g.40gb" || gis[0].Placement.Start != 4 {
		t.Fatalf("GPU instances after prepare = %+v, want one 3g.40gb at 4", gis)
	}
	data, err := os.ReadFile(cdi.ClaimSpecPath(dir+"/cdi", "mig-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50")) || !bytes.Contains(data, []byte("MIG-")) {
		t.Errorf("spec lacks the MPS limit or the MIG UUID:\n%s", data)
	}

	t.Run("restart between prepare and unprepare", func(t *testing.T) {
		// A new process on a GPU that was reset: the instance is gone
		// and is made again from the checkpoint.
		b2 := simBackend(t)
		d2 := testDriver(t, b2, dir, nil, nil)
		if got := d2.Prepared(); len(got) != 1 || got[0] != "mig-1" {
			t.Fatalf("prepared after restart = %v", got)
		}
		gis, _ := b2.GPUInstances(context.Background(), 1)
		if len(gis) != 1 {
			t.Fatalf("instance not restored: %+v", gis)
		}
		for _, s := range d2.Resources().Pools[testNode].Slices {
			for _, dv := range s.Devices {
				if len(dv.Taints) > 0 {
					t.Errorf("%s tainted %v after restart: the claim's own instance is not the GPU's layout", dv.Name, dv.Taints)
				}
			}
		}
		unprepareOne(t, d2, "mig-1")
		gis, _ = b2.GPUInstances(context.Background(), 1)
		if len(gis) != 0 {
			t.Errorf("unprepare left %+v", gis)
		}
	})
}

func TestPrepareBadInput(t *testing.T) {
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		wantErr string
	}{
		{name: "unknown config field", claim: claim("b1", "gpu-2").config(resourceapi.AllocationConfigSourceClaim,
			`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","replicas":4}}`).obj(), wantErr: `unknown field "replicas"`},
		{name: "time-slicing a MIG device", claim: claim("b2", "gpu-0-mig-1g-10gb-0-1").config(resourceapi.AllocationConfigSourceClass,
			`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`).obj(), wantErr: "MIG devices cannot be time-sliced"},
		{name: "GpuConfig on a MIG device", claim: claim("b3", "gpu-0-mig-1g-10gb-0-1").config(resourceapi.AllocationConfigSourceClaim,
			`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig"}`).obj(), wantErr: "must be kind MigDeviceConfig"},
		{name: "MPS limit above the device", claim: claim("b4", "gpu-0-mig-1g-10gb-0-1", "gpu-0-mig-1g-10gb-1-1").config(resourceapi.AllocationConfigSourceClaim,
			`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"40Gi"}}}`).obj(), wantErr: "more than device"},
		{name: "unknown device", claim: claim("b5", "gpu-9").obj(), wantErr: "not one of this node's"},
		{name: "unallocated", claim: func() *resourceapi.ResourceClaim { c := claim("b6").obj(); c.Status.Allocation = nil; return c }(), wantErr: "not allocated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			b := simBackend(t)
			l := ledger.New()
			d := testDriver(t, b, dir, l, nil)
			_, err := prepareOne(t, d, tt.claim)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			// Nothing prepared, nothing leaked.
			if got := d.Prepared(); len(got) != 0 {
				t.Errorf("prepared %v", got)
			}
			if got := l.Claimed(); len(got) != 0 {
				t.Errorf("ledger holds %v", got)
			}
			if entries, _ := os.ReadDir(dir + "/cdi"); len(entries) != 0 {
				t.Errorf("CDI directory holds %v", entries)
			}
			for i := range 2 {
				if gis, _ := b.GPUInstances(context.Background(), i); len(gis) != 0 {
					t.Errorf("GPU %d keeps instances %+v", i, gis)
				}
			}
			state, err := loadCheckpoint(dir + "/state/checkpoint.json")
			if err != nil || len(state.Claims) != 0 {
				t.Errorf("checkpoint = %+v, %v", state, err)
			}
		})
	}
}

func TestTaints(t *testing.T) {
	b := simBackend(t)
	devices, _ := b.Devices(context.Background())
	l := ledger.New()
	h := fakeHealth{devices[2].UUID: "XID 79"}
	d := testDriver(t, b, t.TempDir(), l, h)
	// The plugin gave GPU 3 and, whole, GPU 1 (in MIG mode) to pods.
	l.SetPluginHeld([]string{devices[3].UUID, devices[1].UUID})
	taints := map[string][]resourceapi.DeviceTaint{}
	for _, s := range d.Resources().Pools[testNode].Slices {
		for _, dv := range s.Devices {
			taints[dv.Name] = dv.Taints
		}
	}
	if ts := taints["gpu-2"]; len(ts) != 1 || ts[0].Key != apidra.TaintUnhealthy || ts[0].Value != "XID-79" || ts[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("gpu-2 taints = %+v, want unhealthy", ts)
	}
	if ts := taints["gpu-3"]; len(ts) != 1 || ts[0].Key != apidra.TaintDevicePlugin {
		t.Errorf("gpu-3 taints = %+v, want device-plugin", ts)
	}
	if ts := taints["gpu-0-mig-1g-10gb-0-1"]; len(ts) != 0 {
		t.Errorf("a free MIG device is tainted: %+v", ts)
	}
	if ts := taints["gpu-1-mig-1g-10gb-0-1"]; len(ts) != 1 || ts[0].Key != apidra.TaintDevicePlugin {
		t.Errorf("MIG device of a plugin-held GPU: taints = %+v, want device-plugin", ts)
	}
	if _, err := prepareOne(t, d, claim("t1", "gpu-3").obj()); !errors.Is(err, ledger.ErrHeld) {
		t.Errorf("preparing a plugin-held GPU: %v, want ErrHeld", err)
	}
	if _, err := prepareOne(t, d, claim("t2", "gpu-1-mig-1g-10gb-0-1").obj()); !errors.Is(err, ledger.ErrHeld) {
		t.Errorf("preparing a MIG device of a plugin-held GPU: %v, want ErrHeld", err)
	}
	if gis, _ := b.GPUInstances(context.Background(), 1); len(gis) != 0 {
		t.Errorf("a refused MIG claim made instances %+v", gis)
	}
}

func TestRollbackHalfPrepared(t *testing.T) {
	dir := t.TempDir()
	b := simBackend(t)
	ctx := context.Background()
	// A prepare that crashed after creating its instance, before
	// recording it.
	if _, err := b.CreateGPUInstance(ctx, 0, "2g.20gb", nil); err != nil {
		t.Fatal(err)
	}
	gis, _ := b.GPUInstances(ctx, 0)
	state := &checkpoint{Version: checkpointVersion, Claims: map[string]*preparedClaim{"half": {
		Namespace: "ns", Name: "half", State: statePreparing,
		Devices: []preparedDevice{{Requests: []string{"r"}, Pool: testNode, Device: "x", MIG: &preparedMIG{GPUIndex: 0, Profile: "2g.20gb", PlacementStart: gis[0].Placement.Start, PlacementSize: gis[0].Placement.Size}}},
	}}}
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := state.save(filepath.Join(dir, "state", "checkpoint.json")); err != nil {
		t.Fatal(err)
	}
	// And a CDI spec written just before a crash, for a claim the
	// checkpoint does not know.
	w, err := cdi.NewWriter(cdi.Options{Dir: dir + "/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteClaim(cdi.ClaimSpec{UID: "orphan", Devices: []cdi.ClaimDevice{{Name: "gpu-2", UUID: "GPU-x", Paths: []string{"/dev/nvidia2"}}}}); err != nil {
		t.Fatal(err)
	}
	d := testDriver(t, b, dir, nil, nil)
	if got := d.Prepared(); len(got) != 0 {
		t.Errorf("prepared = %v", got)
	}
	if uids, _ := w.ClaimSpecUIDs(); len(uids) != 0 {
		t.Errorf("orphan CDI specs kept: %v", uids)
	}
	if gis, _ := b.GPUInstances(ctx, 0); len(gis) != 0 {
		t.Errorf("half-made instance kept: %+v", gis)
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "560.35.03": "560.35.3", "12": "12.0.0"} {
		if got, err := semver(in); err != nil || got != want {
			t.Errorf("semver(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.2.3.4", "a.b"} {
		if _, err := semver(bad); err == nil {
			t.Errorf("semver(%q) accepted", bad)
		}
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add([]byte(`{"version":"gpu.gpuplane.io/checkpoint/v1","claims":{"u":{"namespace":"ns","name":"c","state":"Prepared","devices":[{"requests":["r"],"pool":"n","device":"gpu-0","uuid":"GPU-1","cdiDeviceIDs":["gpu.gpuplane.io/claim=u-gpu-0"]}]}}}`))
	f.Add([]byte(`{"version":"gpu.gpuplane.io/checkpoint/v1","claims":{"u":{"state":"Preparing","devices":[{"device":"m","mig":{"gpuIndex":0,"profile":"1g.10gb","placementStart":0,"placementSize":1}}]}}}`))
	f.Add([]byte(`{"version":"gpu.gpuplane.io/checkpoint/v1","claims":{"u":{"state":"Prepared","devices":[{"device":"gpu-0","uuid":"GPU-1","share":{"memoryBytes":1073741824,"deviceBytes":85899345920,"computePercent":25}}],"sharing":{"timeSlices":[{"gpuIndex":0,"slice":3}],"mps":{"pipeDir":"/p","logDir":"/l","gpus":["GPU-1"],"devices":[0],"pinnedMemLimitsMiB":[1024],"activeThreadPercentage":50}}}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeCheckpoint(bytes.NewReader(data))
		if err != nil {
			return
		}
		for uid, pc := range c.Claims {
			if uid == "" || pc == nil || (pc.State != statePrepared && pc.State != statePreparing) {
				t.Fatalf("accepted claim %q: %+v", uid, pc)
			}
			if s := pc.Sharing; s != nil && s.MPS != nil {
				for _, i := range s.MPS.Devices {
					if i < 0 || i >= len(pc.Devices) {
						t.Fatalf("accepted MPS device %d of %d", i, len(pc.Devices))
					}
				}
			}
			for _, d := range pc.Devices {
				if err := d.Share.check(); err != nil {
					t.Fatalf("accepted share %+v: %v", d.Share, err)
				}
				if m := d.MIG; m != nil && (m.PlacementSize <= 0 || m.PlacementStart < 0) {
					t.Fatalf("accepted placement %+v", m)
				}
			}
		}
	})
}
