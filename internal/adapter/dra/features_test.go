package dra

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// gpuSlice is the slice of one GPU gpuplane's driver publishes for node.
func gpuSlice(node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: apidra.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				apidra.AttrType: {StringValue: ptr.To(apidra.TypeGPU)}, apidra.AttrIndex: {IntValue: ptr.To(int64(0))}}}}}}
}

// gpuClass is the class of gpuplane's driver's devices.
func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.gpuplane.io"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.gpuplane.io"`}}}}}
}

// TestClaimFeaturesTable holds device-set evaluation to Features: a
// request needing a feature that is off is refused with the feature's
// reason, and one needing a feature that is on is not.
func TestClaimFeaturesTable(t *testing.T) {
	on := Features.Set()
	requests := map[string]resourceapi.DeviceRequest{
		"PrioritizedList": {Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu.gpuplane.io"}}},
		"AdminAccess": {Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true)}},
		"ConsumableCapacity": {Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{apidra.CapacityMemory: resource.MustParse("10Gi")}}}},
	}
	classes := map[string]*resourceapi.DeviceClass{"gpu.gpuplane.io": gpuClass()}
	for _, f := range RequestFeatures {
		t.Run(f.Name, func(t *testing.T) {
			r, ok := requests[f.Name]
			if !ok {
				t.Fatalf("no sample request for feature %s: add one", f.Name)
			}
			if !f.Needs(&r) {
				t.Fatalf("the sample request does not need %s", f.Name)
			}
			s := EvalDeviceSet(nil, []ClaimSpec{{Requests: []resourceapi.DeviceRequest{r}}}, classes, dracel.NewCache(8, CELFeatures))
			if f.On != on.Has("DRA"+f.Name) {
				t.Fatalf("RequestFeatures says %s is on: %v, Features: %v", f.Name, f.On, on.Has("DRA"+f.Name))
			}
			refused := strings.Contains(s.Err, strings.TrimPrefix(f.Refusal, "%s"))
			if refused == f.On {
				t.Errorf("feature on %v, device set error %q: want refused %v", f.On, s.Err, !f.On)
			}
		})
	}
}

// TestDeviceAllowedAgreesWithTheAllocator checks, device by device, that
// a device is in a request's device set exactly when the structured
// allocator, run with Features, gives it to the request.
func TestDeviceAllowedAgreesWithTheAllocator(t *testing.T) {
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
			s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{apidra.CounterComputeSlices: {Value: resource.MustParse("7")}}}}
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{apidra.CounterComputeSlices: {Value: resource.MustParse("1")}}}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := gpuSlice("a")
			counters := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-counters"}, Spec: *s.Spec.DeepCopy()}
			tt.dev(&s.Spec.Devices[0], counters)
			slices := []*resourceapi.ResourceSlice{s}
			if len(counters.Spec.SharedCounters) > 0 {
				s.Spec.Pool.ResourceSliceCount = counters.Spec.Pool.ResourceSliceCount
				counters.Spec.Devices = nil
				slices = append(slices, counters)
			}
			cl := gpuClaim("c", 1)
			cl.Spec.Devices.Requests[0].Exactly.Tolerations = tt.tol
			classes := ClassLister{"gpu.gpuplane.io": gpuClass()}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
			res, err := Allocate(context.Background(), node, slices, nil, classes, structured.AllocatedState{}, []*resourceapi.ResourceClaim{cl}, dracel.NewCache(8, CELFeatures))
			if err != nil {
				t.Fatal(err)
			}
			got, want := DeviceAllowed(&s.Spec.Devices[0], tt.tol), res != nil
			if got != want {
				t.Errorf("DeviceAllowed = %v, the allocator gives the device: %v", got, want)
			}
		})
	}
}
