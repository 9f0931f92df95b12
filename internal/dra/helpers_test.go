package dra

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/ledger"
)

// testProfile is two NVLinked H100s in MIG mode and two whole H100s.
const testProfile = `version: v1
name: dra-test
driverVersion: "560.35.03"
cudaDriverVersion: "12.6"
gpus:
  - model: H100-SXM5-80GB
    count: 2
    migEnabled: true
  - model: H100-SXM5-80GB
    count: 2
topology:
  pairs:
    - gpus: [2, 3]
      nvlink: 18
`

const testNode = "node-a"

func simBackend(t testing.TB) *sim.Backend {
	t.Helper()
	p, err := sim.Parse(strings.NewReader(testProfile), "test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

type fakeHealth map[string]string

func (h fakeHealth) Unhealthy(uuid string) (string, bool) { r, ok := h[uuid]; return r, ok }

// testDriver is a driver on b with its state and CDI specs in dir.
func testDriver(t testing.TB, b *sim.Backend, dir string, l *ledger.Ledger, h HealthSource) *Driver {
	t.Helper()
	w, err := cdi.NewWriter(cdi.Options{Dir: dir + "/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(context.Background(), Options{Backend: b, NodeName: testNode, CDI: w, StateFile: dir + "/state/checkpoint.json", Ledger: l, Health: h, MPSRoot: dir + "/mps"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// claim is an allocated claim of the given devices, one request each.
func claim(uid string, devices ...string) *claimBuilder {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for i, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "r" + string(rune('0'+i)), Driver: apidra.DriverName, Pool: testNode, Device: d,
		})
	}
	return &claimBuilder{c}
}

type claimBuilder struct{ c *resourceapi.ResourceClaim }

func (b *claimBuilder) config(source resourceapi.AllocationConfigSource, raw string, requests ...string) *claimBuilder {
	b.c.Status.Allocation.Devices.Config = append(b.c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: apidra.DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}},
	})
	return b
}

func (b *claimBuilder) obj() *resourceapi.ResourceClaim { return b.c }

func prepareOne(t testing.TB, d *Driver, c *resourceapi.ResourceClaim) ([]string, error) {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	r := res[c.UID]
	var ids []string
	for _, dv := range r.Devices {
		ids = append(ids, dv.CDIDeviceIDs...)
	}
	return ids, r.Err
}

func unprepareOne(t testing.TB, d *Driver, uid string) {
	t.Helper()
	res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res[types.UID(uid)]; err != nil {
		t.Fatalf("unprepare %s: %v", uid, err)
	}
}
