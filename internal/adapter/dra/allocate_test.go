package dra

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// numaSlice is a slice of GPUs gpu-0.. of node a, each on the NUMA node
// given.
func numaSlice(numa ...int64) *resourceapi.ResourceSlice {
	s := gpuSlice("a")
	s.Spec.Devices = nil
	for i, n := range numa {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprint("gpu-", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			apidra.AttrType: {StringValue: ptr.To(apidra.TypeGPU)}, apidra.AttrIndex: {IntValue: ptr.To(int64(i))}, "numa": {IntValue: ptr.To(n)}}})
	}
	return s
}

// TestAllocate checks that Allocate gives devices only among those it is
// narrowed to, leaves allocated ones alone, and returns nil, not other
// devices, when the claims' constraints refuse the narrowed set.
func TestAllocate(t *testing.T) {
	sameNUMA := []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(apidra.DriverName + "/numa"))}}
	for _, tt := range []struct {
		name        string
		numa        []int64
		count       int64
		constraints []resourceapi.DeviceConstraint
		only        []string
		allocated   []string
		// want is the devices given, nil for none.
		want []string
	}{
		{name: "exactly the devices chosen", numa: []int64{0, 0, 0, 0}, count: 2, only: []string{"a/gpu-1", "a/gpu-3"}, want: []string{"gpu-1", "gpu-3"}},
		{name: "all devices when not narrowed", numa: []int64{0, 0}, count: 2, want: []string{"gpu-0", "gpu-1"}},
		{name: "allocated devices are not given", numa: []int64{0, 0, 0}, count: 2, allocated: []string{"gpu-0"}, want: []string{"gpu-1", "gpu-2"}},
		{name: "too few free among those chosen", numa: []int64{0, 0, 0}, count: 2, only: []string{"a/gpu-0", "a/gpu-1"}, allocated: []string{"gpu-1"}},
		{name: "constraints refuse the choice", numa: []int64{0, 1, 1, 0}, count: 2, constraints: sameNUMA, only: []string{"a/gpu-0", "a/gpu-1"}},
		{name: "constraints met by the choice", numa: []int64{0, 1, 1, 0}, count: 2, constraints: sameNUMA, only: []string{"a/gpu-1", "a/gpu-2"}, want: []string{"gpu-1", "gpu-2"}},
		{name: "count 0 is one device, as the API server defaults it", numa: []int64{0, 0}, count: 0, only: []string{"a/gpu-1"}, want: []string{"gpu-1"}},
		{name: "constraints met elsewhere when not narrowed", numa: []int64{0, 1, 1, 2}, count: 2, constraints: sameNUMA, want: []string{"gpu-1", "gpu-2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cl := gpuClaim("c", tt.count)
			cl.Spec.Devices.Constraints = tt.constraints
			var only sets.Set[string]
			if tt.only != nil {
				only = sets.New(tt.only...)
			}
			var allocs []*resourceapi.AllocationResult
			for _, d := range tt.allocated {
				allocs = append(allocs, &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "gpu", Driver: apidra.DriverName, Pool: "a", Device: d}}}})
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
			res, err := Allocate(context.Background(), node, []*resourceapi.ResourceSlice{numaSlice(tt.numa...)}, only, ClassLister{"gpu.gpuplane.io": gpuClass()},
				AllocatedState(allocs), []*resourceapi.ResourceClaim{cl}, dracel.NewCache(8, CELFeatures))
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if res != nil {
					t.Fatalf("allocated %+v, want nothing", res)
				}
				return
			}
			if len(res) != 1 {
				t.Fatalf("results %+v, want one allocation", res)
			}
			got := sets.New[string]()
			for _, r := range res[0].Devices.Results {
				got.Insert(r.Device)
			}
			if !got.Equal(sets.New(tt.want...)) {
				t.Errorf("allocated %v, want %v", sets.List(got), tt.want)
			}
		})
	}
}

// TestAllocatedState checks that a device allocated whole is held whole,
// and a share of one (a result with a ShareID) is held as that share only.
func TestAllocatedState(t *testing.T) {
	whole := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: apidra.DriverName, Pool: "a", Device: "gpu-0"}
	shared := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: apidra.DriverName, Pool: "a", Device: "gpu-1", ShareID: ptr.To[types.UID]("s1"),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{apidra.CapacityMemory: resource.MustParse("10Gi")}}
	for _, tt := range []struct {
		name               string
		results            []resourceapi.DeviceRequestAllocationResult
		wantWhole, wantSub int
	}{
		{name: "none"},
		{name: "whole", results: []resourceapi.DeviceRequestAllocationResult{whole}, wantWhole: 1},
		{name: "share", results: []resourceapi.DeviceRequestAllocationResult{shared}, wantSub: 1},
		{name: "both", results: []resourceapi.DeviceRequestAllocationResult{whole, shared}, wantWhole: 1, wantSub: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := AllocatedState([]*resourceapi.AllocationResult{{Devices: resourceapi.DeviceAllocationResult{Results: tt.results}}})
			if st.AllocatedDevices.Len() != tt.wantWhole || st.AllocatedSharedDeviceIDs.Len() != tt.wantSub {
				t.Errorf("whole %v, shares %v; want %d and %d", st.AllocatedDevices, st.AllocatedSharedDeviceIDs, tt.wantWhole, tt.wantSub)
			}
			id := structured.MakeDeviceID(apidra.DriverName, "a", "gpu-1")
			if got := len(st.AggregatedCapacity[id]); (tt.wantSub > 0) != (got > 0) {
				t.Errorf("capacity consumed of gpu-1: %v", st.AggregatedCapacity[id])
			}
		})
	}
}
