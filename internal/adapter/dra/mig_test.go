package dra

import (
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// migDevice is a MIG device of the GPU at parent (nil: no parentIndex)
// taking slices of counter set set.
func migDevice(name string, parent *int64, set string, slices int64) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		apidra.AttrType: {StringValue: ptr.To(apidra.TypeMIG)}, apidra.AttrMIGProfile: {StringValue: ptr.To(fmt.Sprintf("%dg", slices))}},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{
			apidra.CounterComputeSlices: {Value: *resource.NewQuantity(slices, resource.DecimalSI)}}}}}
	if parent != nil {
		d.Attributes[apidra.AttrParentIndex] = resourceapi.DeviceAttribute{IntValue: parent}
	}
	return d
}

// TestMIGDevices checks how a node's MIG devices make GPUs in MIG mode.
func TestMIGDevices(t *testing.T) {
	counters := func(sets ...string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "counters"}, Spec: resourceapi.ResourceSliceSpec{Pool: resourceapi.ResourcePool{Name: "a"}}}
		for _, n := range sets {
			s.Spec.SharedCounters = append(s.Spec.SharedCounters, resourceapi.CounterSet{Name: n, Counters: map[string]resourceapi.Counter{
				apidra.CounterComputeSlices: {Value: *resource.NewQuantity(7, resource.DecimalSI)}}})
		}
		return s
	}
	devices := func(ds ...resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "migs"}, Spec: resourceapi.ResourceSliceSpec{Pool: resourceapi.ResourcePool{Name: "a"}, Devices: ds}}
	}
	zero, one := ptr.To(int64(0)), ptr.To(int64(1))
	for _, tt := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		// want is, by GPU index, its devices in order.
		want map[int64][]string
	}{
		{name: "grouped by parent, smallest first", slices: []*resourceapi.ResourceSlice{counters("g0", "g1"),
			devices(migDevice("m-3g", zero, "g0", 3), migDevice("m-1g", zero, "g0", 1), migDevice("n-7g", one, "g1", 7))},
			want: map[int64][]string{0: {"m-1g", "m-3g"}, 1: {"n-7g"}}},
		{name: "no parent index", slices: []*resourceapi.ResourceSlice{counters("g0"), devices(migDevice("m", nil, "g0", 1))}, want: map[int64][]string{}},
		{name: "more slices than the set", slices: []*resourceapi.ResourceSlice{counters("g0"), devices(migDevice("m", zero, "g0", 8))}, want: map[int64][]string{}},
		{name: "a set the pool does not declare", slices: []*resourceapi.ResourceSlice{counters("g0"), devices(migDevice("m", zero, "g9", 1))}, want: map[int64][]string{}},
		{name: "one GPU, two sets", slices: []*resourceapi.ResourceSlice{counters("g0", "g1"), devices(migDevice("m", zero, "g0", 1), migDevice("n", zero, "g1", 1))},
			want: map[int64][]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := MIGDevices(tt.slices)
			if len(got) != len(tt.want) {
				t.Fatalf("GPUs %v, want %v", got, tt.want)
			}
			for idx, names := range tt.want {
				g := got[idx]
				if g == nil || g.Slices != 7 {
					t.Fatalf("GPU %d: %+v, want 7 slices", idx, g)
				}
				var have []string
				for _, m := range g.MIGs {
					have = append(have, m.Name)
				}
				if !slices.Equal(have, names) {
					t.Errorf("GPU %d devices %v, want %v", idx, have, names)
				}
			}
		})
	}
}
