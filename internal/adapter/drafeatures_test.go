package adapter

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/adapter/dra"
)

// TestClaimFeaturesTable holds device-set evaluation to dra.Features: a
// request needing a feature that is off is refused with the feature's
// reason, and one needing a feature that is on is not.
func TestClaimFeaturesTable(t *testing.T) {
	on := dra.Features.Set()
	requests := map[string]resourceapi.DeviceRequest{
		"PrioritizedList": {Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu.gpuplane.io"}}},
		"AdminAccess": {Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true)}},
		"ConsumableCapacity": {Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{apidra.CapacityMemory: resource.MustParse("10Gi")}}}},
	}
	classes := map[string]*resourceapi.DeviceClass{"gpu.gpuplane.io": gpuClass("gpu.gpuplane.io")}
	for _, f := range dra.RequestFeatures {
		t.Run(f.Name, func(t *testing.T) {
			r, ok := requests[f.Name]
			if !ok {
				t.Fatalf("no sample request for feature %s: add one", f.Name)
			}
			if !f.Needs(&r) {
				t.Fatalf("the sample request does not need %s", f.Name)
			}
			s := evalDeviceSet(nil, []claimSpecKey{{Requests: []resourceapi.DeviceRequest{r}}}, classes, newDRACache().cel)
			if f.On != on.Has("DRA"+f.Name) {
				t.Fatalf("dra.RequestFeatures says %s is on: %v, dra.Features: %v", f.Name, f.On, on.Has("DRA"+f.Name))
			}
			refused := strings.Contains(s.err, strings.TrimPrefix(f.Refusal, "%s"))
			if refused == f.On {
				t.Errorf("feature on %v, device set error %q: want refused %v", f.On, s.err, !f.On)
			}
		})
	}
}
