package adapter

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
)

// h100MIG are an H100's MIG profiles: compute slices, and the memory
// slice placements (start, size) of each.
var h100MIG = []struct {
	name       string
	slices     int
	placements [][2]int
}{
	{"1g.10gb", 1, [][2]int{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
	{"2g.20gb", 2, [][2]int{{0, 2}, {2, 2}, {4, 2}}},
	{"3g.40gb", 3, [][2]int{{0, 4}, {4, 4}}},
	{"4g.40gb", 4, [][2]int{{0, 4}}},
	{"7g.80gb", 7, [][2]int{{0, 8}}},
}

// migSlices are the ResourceSlices gpuplane's driver publishes for a node
// whose GPUs are all in MIG mode (internal/dra): one slice of MIG devices
// per GPU, each consuming its GPU's compute slices and the memory slices
// of its placement, and one slice of the GPUs' counter sets.
func migSlices(node string, gpus int) []*resourceapi.ResourceSlice {
	pool := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(gpus + 1)}
	counters := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-counters"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(node), Pool: pool}}
	var out []*resourceapi.ResourceSlice
	n := func(v int) resourceapi.Counter {
		return resourceapi.Counter{Value: *resource.NewQuantity(int64(v), resource.DecimalSI)}
	}
	for g := range gpus {
		set := fmt.Sprintf("gpu-%d-counters", g)
		cs := resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{dra.CounterComputeSlices: n(7)}}
		for m := range 8 {
			cs.Counters[fmt.Sprint(dra.CounterMemorySlicePrefix, m)] = n(1)
		}
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, cs)
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-gpu-%d", node, g)},
			Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(node), Pool: pool}}
		for _, p := range h100MIG {
			for _, pl := range p.placements {
				use := map[string]resourceapi.Counter{dra.CounterComputeSlices: n(p.slices)}
				for m := pl[0]; m < pl[0]+pl[1]; m++ {
					use[fmt.Sprint(dra.CounterMemorySlicePrefix, m)] = n(1)
				}
				s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
					Name: fmt.Sprintf("gpu-%d-mig-%s-%d-%d", g, strings.ReplaceAll(p.name, ".", "-"), pl[0], pl[1]),
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						dra.AttrType:        {StringValue: ptr.To(dra.TypeMIG)},
						dra.AttrMIGProfile:  {StringValue: ptr.To(p.name)},
						dra.AttrParentIndex: {IntValue: ptr.To(int64(g))},
						dra.AttrProductName: {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
					},
					ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: use}},
				})
			}
		}
		out = append(out, s)
	}
	return append(out, counters)
}

// typeClass is a class of the agent's devices of one type, as it
// installs them (internal/dra.DeviceClasses).
func typeClass(name, typ string) *resourceapi.DeviceClass {
	c := gpuClass(name)
	c.Spec.Selectors[0].CEL.Expression += fmt.Sprintf(" && device.attributes[%q].type == %q", dra.DriverName, typ)
	return c
}

// migClaim asks for one MIG device of a profile.
func migClaim(name, profile string) *resourceapi.ResourceClaim {
	return gpuClaim(name, "mig.gpu.gpuplane.io", 1, fmt.Sprintf("device.attributes[%q].profile == %q", dra.DriverName, profile))
}

func newMIGFixture(t *testing.T, gpus int) *loopFixture {
	t.Helper()
	f := newLoopFixture(t, Config{}, draNode("a"))
	for _, s := range migSlices("a", gpus) {
		f.cache.upsertSlice(s)
	}
	f.cache.upsertClass(typeClass("mig.gpu.gpuplane.io", dra.TypeMIG))
	f.cache.upsertClass(typeClass("gpu.gpuplane.io", dra.TypeGPU))
	return f
}

func TestDRAMIGNodeModel(t *testing.T) {
	f := newMIGFixture(t, 2)
	f.cache.mu.Lock()
	ni := f.cache.nodes["a"]
	f.cache.mu.Unlock()
	if len(ni.m.GPUs) != 2 {
		t.Fatalf("node a has %d GPUs in the model, want 2 GPUs in MIG mode", len(ni.m.GPUs))
	}
	for g, gp := range ni.m.GPUs {
		if gp.MIGSlices != 7 || !gp.ClaimOnly || gp.MIGInstanceSlices != 0 {
			t.Errorf("GPU %d is %+v, want a claim-only GPU of 7 MIG slices laid out on demand", g, gp)
		}
		if d := ni.devs[g]; d == nil || d.Dev != nil || len(d.MIGs) != 14 {
			t.Errorf("GPU %d has devices %+v, want its 14 MIG devices", g, d)
		}
	}
}

func TestDRAMIGClaims(t *testing.T) {
	tests := []struct {
		name     string
		gpus     int
		profiles []string
		// want is each claim's device, "" when it waits.
		want []string
	}{
		{name: "counters of one GPU fit only one 4g", gpus: 1, profiles: []string{"4g.40gb", "4g.40gb"},
			want: []string{"a/gpu-0-mig-4g-40gb-0-4", ""}},
		{name: "two 4g go to two GPUs", gpus: 2, profiles: []string{"4g.40gb", "4g.40gb"},
			want: []string{"a/gpu-0-mig-4g-40gb-0-4", "a/gpu-1-mig-4g-40gb-0-4"}},
		{name: "a 3g beside a 4g takes the other half", gpus: 2, profiles: []string{"4g.40gb", "3g.40gb"},
			want: []string{"a/gpu-0-mig-4g-40gb-0-4", "a/gpu-0-mig-3g-40gb-4-4"}},
		{name: "seven 1g fill one GPU", gpus: 1, profiles: []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
			want: []string{"a/gpu-0-mig-1g-10gb-0-1", "a/gpu-0-mig-1g-10gb-1-1", "a/gpu-0-mig-1g-10gb-2-1", "a/gpu-0-mig-1g-10gb-3-1",
				"a/gpu-0-mig-1g-10gb-4-1", "a/gpu-0-mig-1g-10gb-5-1", "a/gpu-0-mig-1g-10gb-6-1", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMIGFixture(t, tc.gpus)
			// One claim per cycle, each seen allocated before the next:
			// the snapshot counts the allocated MIG devices' slices.
			for i, p := range tc.profiles {
				name := fmt.Sprint("c", i)
				f.cache.upsertClaim(migClaim(name, p))
				f.cache.upsertPod(claimPod(name, name))
				f.cycle()
				f.applyClaims()
			}
			got := map[string]string{}
			for _, l := range f.api.claimLog() {
				fs := strings.Fields(l)
				got[fs[0]] = fs[3]
			}
			for i, want := range tc.want {
				if g := got[fmt.Sprint("ns/c", i)]; g != want {
					t.Errorf("claim c%d got %q, want %q (all: %v)", i, g, want, f.api.claimLog())
				}
			}
			if last := fmt.Sprint("ns/c", len(tc.want)-1); tc.want[len(tc.want)-1] == "" {
				if got := f.status.conditions[last]; !strings.Contains(got, "free devices for the claims") {
					t.Errorf("the waiting pod says %q, want that no GPU has the free MIG slices", got)
				}
			}
		})
	}
}

func TestDRAMIGClaimsInOneCycle(t *testing.T) {
	// Two 4g claims in one cycle, the informer lagging: the core gives
	// them different GPUs from its own books of compute slices.
	f := newMIGFixture(t, 2)
	for _, name := range []string{"c0", "c1"} {
		f.cache.upsertClaim(migClaim(name, "4g.40gb"))
		f.cache.upsertPod(claimPod(name, name))
	}
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 2 || strings.Fields(log[0])[3][:7] == strings.Fields(log[1])[3][:7] {
		t.Fatalf("claim writes %v, want the two 4g devices on two GPUs", log)
	}
}

func TestDRAMIGUnsupportedClaims(t *testing.T) {
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{name: "two MIG devices", claim: gpuClaim("c", "mig.gpu.gpuplane.io", 2),
			want: `UnsupportedClaim: pod ns/p: ResourceClaim ns/c: spec.devices.requests[0] ("gpu").exactly.count: the request selects MIG devices and asks for 2`},
		{name: "a whole GPU on a MIG node", claim: gpuClaim("c", "gpu.gpuplane.io", 1), want: "no device satisfies the claims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMIGFixture(t, 1)
			f.cache.upsertClaim(tc.claim)
			f.cache.upsertPod(claimPod("p", "c"))
			f.cycle()
			if len(f.api.claimLog()) != 0 {
				t.Fatalf("wrote %v", f.api.claimLog())
			}
			if got := f.status.conditions["ns/p"]; !strings.Contains(got, tc.want) {
				t.Errorf("the pod says %q, want %q", got, tc.want)
			}
		})
	}
}
