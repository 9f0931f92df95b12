package adapter

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
)

// TestClaimFeaturesTable holds device-set evaluation to claimFeatures: a
// request needing a feature that is off is refused with the feature's
// reason, and one needing a feature that is on is not.
func TestClaimFeaturesTable(t *testing.T) {
	on := claimFeatures.Set()
	requests := map[string]resourceapi.DeviceRequest{
		"PrioritizedList": {Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu.gpuplane.io"}}},
		"AdminAccess": {Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true)}},
		"ConsumableCapacity": {Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityMemory: resource.MustParse("10Gi")}}}},
	}
	classes := map[string]*resourceapi.DeviceClass{"gpu.gpuplane.io": gpuClass("gpu.gpuplane.io")}
	for _, f := range requestFeatures {
		t.Run(f.name, func(t *testing.T) {
			r, ok := requests[f.name]
			if !ok {
				t.Fatalf("no sample request for feature %s: add one", f.name)
			}
			if !f.needs(&r) {
				t.Fatalf("the sample request does not need %s", f.name)
			}
			s := evalDeviceSet(nil, []claimSpecKey{{Requests: []resourceapi.DeviceRequest{r}}}, classes, newDRACache().cel)
			if f.on != on.Has("DRA"+f.name) {
				t.Fatalf("requestFeatures says %s is on: %v, claimFeatures: %v", f.name, f.on, on.Has("DRA"+f.name))
			}
			refused := strings.Contains(s.err, strings.TrimPrefix(f.refusal, "%s"))
			if refused == f.on {
				t.Errorf("feature on %v, device set error %q: want refused %v", f.on, s.err, !f.on)
			}
		})
	}
}

// TestFeatureAllowsAgreesWithTheAllocator checks, device by device, that
// a device is in a request's device set exactly when the structured
// allocator, run with claimFeatures, gives it to the request.
func TestFeatureAllowsAgreesWithTheAllocator(t *testing.T) {
	taint := resourceapi.DeviceTaint{Key: "gpuplane.io/unhealthy", Value: "xid", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	tol := resourceapi.DeviceToleration{Key: "gpuplane.io/unhealthy", Operator: resourceapi.DeviceTolerationOpExists}
	for _, tt := range []struct {
		name string
		dev  func(d *resourceapi.Device, s *resourceapi.ResourceSlice)
		tol  []resourceapi.DeviceToleration
	}{
		{name: "plain", dev: func(*resourceapi.Device, *resourceapi.ResourceSlice) {}},
		{name: "tainted", dev: func(d *resourceapi.Device, _ *resourceapi.ResourceSlice) { d.Taints = []resourceapi.DeviceTaint{taint} }},
		{name: "tainted and tolerated", dev: func(d *resourceapi.Device, _ *resourceapi.ResourceSlice) { d.Taints = []resourceapi.DeviceTaint{taint} },
			tol: []resourceapi.DeviceToleration{tol}},
		{name: "taint without effect on scheduling", dev: func(d *resourceapi.Device, _ *resourceapi.ResourceSlice) {
			d.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNone}}
		}},
		{name: "binding conditions", dev: func(d *resourceapi.Device, _ *resourceapi.ResourceSlice) {
			d.BindingConditions, d.BindingFailureConditions = []string{"attached"}, []string{"failed"}
		}},
		{name: "consumes shared counters", dev: func(d *resourceapi.Device, s *resourceapi.ResourceSlice) {
			// The counter set in a slice of its own, as the agent
			// publishes it.
			s.Spec.Pool.ResourceSliceCount = 2
			s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{dra.CounterComputeSlices: {Value: resource.MustParse("7")}}}}
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{dra.CounterComputeSlices: {Value: resource.MustParse("1")}}}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := gpuSlice("a", 1, "H100")
			counters := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-counters"}, Spec: *s.Spec.DeepCopy()}
			tt.dev(&s.Spec.Devices[0], counters)
			slices := []*resourceapi.ResourceSlice{s}
			if len(counters.Spec.SharedCounters) > 0 {
				s.Spec.Pool.ResourceSliceCount = counters.Spec.Pool.ResourceSliceCount
				counters.Spec.Devices = nil
				slices = append(slices, counters)
			}
			cl := gpuClaim("c", "gpu.gpuplane.io", 1)
			cl.Spec.Devices.Requests[0].Exactly.Tolerations = tt.tol
			c := newDRACache()
			c.classes["gpu.gpuplane.io"] = gpuClass("gpu.gpuplane.io")
			a, err := structured.NewAllocator(context.Background(), claimFeatures, structured.AllocatedState{}, classLister{c}, slices, c.cel)
			if err != nil {
				t.Fatal(err)
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
			res, err := a.Allocate(context.Background(), node, []*resourceapi.ResourceClaim{cl})
			if err != nil {
				t.Fatal(err)
			}
			got, want := featureAllows(&s.Spec.Devices[0], tt.tol), res != nil
			if got != want {
				t.Errorf("featureAllows = %v, the allocator gives the device: %v", got, want)
			}
		})
	}
}
