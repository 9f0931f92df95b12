package adapter

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
	seam "github.com/gpuplane/gpuplane/internal/adapter/dra"
)

// FuzzDRAMIGSlices feeds the scheduler MIG devices and counter sets with
// whatever a writer may have put in them (parent indexes, counter set
// names, compute slices declared and consumed, profiles, taints) and two
// claims for one MIG device each: the cycle never panics, a GPU in MIG
// mode never has more compute slices than its counter set, and the
// devices allocated on one GPU never consume more compute slices than it
// has.
func FuzzDRAMIGSlices(f *testing.F) {
	f.Add(2, int64(0), 7, 4, "gpu-0-counters", "gpu-0-counters", "4g.40gb", false)
	f.Add(3, int64(-1), 0, 9, "x", "y", "", true)
	f.Add(70, int64(1<<40), 1<<20, 1, "gpu-0-counters", "gpu-0-counters", "1g.10gb", false)
	f.Fuzz(func(t *testing.T, devices int, parent int64, total, each int, declared, consumed, profile string, taint bool) {
		devices = min(max(devices, 0), 200)
		f := newLoopFixture(t, Config{}, draNode("a"))
		s := gpuSlice("a", 0, "")
		s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: declared, Counters: map[string]resourceapi.Counter{
			dra.CounterComputeSlices: {Value: *resource.NewQuantity(int64(total), resource.DecimalSI)}}}}
		for i := range devices {
			d := resourceapi.Device{Name: fmt.Sprint("mig-", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				dra.AttrType:        {StringValue: ptr.To(dra.TypeMIG)},
				dra.AttrParentIndex: {IntValue: ptr.To(parent + int64(i%3))},
				dra.AttrMIGProfile:  {StringValue: ptr.To(profile)},
			}, ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: consumed, Counters: map[string]resourceapi.Counter{
				dra.CounterComputeSlices: {Value: *resource.NewQuantity(int64(each+i%2), resource.DecimalSI)}}}}}
			if taint && i%2 == 0 {
				d.Taints = []resourceapi.DeviceTaint{{Key: dra.TaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
			}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
		f.cache.upsertSlice(s)
		f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
		for _, name := range []string{"c0", "c1"} {
			f.cache.upsertClaim(gpuClaim(name, "gpu.gpuplane.io", 1))
			f.cache.upsertPod(claimPod(name, name))
		}
		f.cycle()
		f.cache.mu.Lock()
		ni := f.cache.nodes["a"]
		f.cache.mu.Unlock()
		if len(ni.m.GPUs) > maxClaimGPUs {
			t.Fatalf("node has %d GPUs, more than %d", len(ni.m.GPUs), maxClaimGPUs)
		}
		used := map[int]int{}
		for g, gp := range ni.m.GPUs {
			if gp.MIGSlices > total || (gp.MIGSlices > 0 && ni.devs[g].Dev != nil) {
				t.Fatalf("GPU %d is %+v with %d slices declared", g, gp, total)
			}
		}
		for _, w := range f.api.claimLog() {
			dev := strings.Fields(w)[3]
			_, name, _ := strings.Cut(dev, "/")
			sh, ok := seam.DeviceShare(ni.devs, ni.m.GPUs, dra.DriverName, "a", name)
			if !ok {
				t.Fatalf("claim write %q names a device that is no GPU of the node", w)
			}
			used[sh.Index] += sh.MIGSlices
			if g := ni.m.GPUs[sh.Index]; g.MIGSlices > 0 && used[sh.Index] > g.MIGSlices {
				t.Fatalf("GPU %d: %d compute slices allocated of %d (%v)", sh.Index, used[sh.Index], g.MIGSlices, f.api.claimLog())
			}
		}
	})
}
