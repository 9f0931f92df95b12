package adapter

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
)

// FuzzDRASliceAndClaim feeds the scheduler a ResourceSlice, a DeviceClass
// and a ResourceClaim with whatever a writer may have put in them (device
// count, type and index attributes, memory, selectors, counts): the cycle
// never panics, a node never gets more GPUs than maxClaimGPUs, and a claim
// that is allocated gets distinct devices, all on the pod's node: as many
// as it asked for (mode 0, an exact count), one or more but no more than
// the slice has (mode 1, allocationMode All), or as many as one of its
// firstAvailable subrequests asks (mode 2: the count with the claim's
// selector, else one device of the class).
func FuzzDRASliceAndClaim(f *testing.F) {
	f.Add(8, "gpu", int64(0), "H100", "80Gi", `device.driver == "gpu.gpuplane.io"`, `device.attributes["gpu.gpuplane.io"].productName == "H100"`, int64(1), "gpu.gpuplane.io", uint8(0))
	f.Add(2, "mig", int64(-3), "", "-1", `true`, `device.attributes["gpu.gpuplane.io"].nosuch`, int64(3), "other", uint8(0))
	f.Add(300, "gpu", int64(1<<40), "A100", "1e30", `device.capacity["gpu.gpuplane.io"].memory.compareTo(quantity("40Gi")) >= 0`, `device.attributes[`, int64(-1), "gpu.gpuplane.io", uint8(0))
	f.Add(4, "gpu", int64(0), "H100", "80Gi", `true`, `device.attributes["gpu.gpuplane.io"].productName == "H100"`, int64(1), "gpu.gpuplane.io", uint8(1))
	f.Add(3, "gpu", int64(0), "A100", "40Gi", `true`, `device.attributes["gpu.gpuplane.io"].productName == "A100"`, int64(0), "gpu.gpuplane.io", uint8(1))
	f.Add(2, "gpu", int64(0), "H100", "80Gi", `true`, `device.attributes["gpu.gpuplane.io"].productName == "H100"`, int64(4), "gpu.gpuplane.io", uint8(2))
	f.Add(8, "gpu", int64(0), "H100", "80Gi", `true`, ``, int64(2), "gpu.gpuplane.io", uint8(2))
	f.Fuzz(func(t *testing.T, devices int, typ string, index int64, product, mem, classSel, claimSel string, count int64, class string, mode uint8) {
		devices = min(max(devices, 0), 300)
		f := newLoopFixture(t, Config{}, draNode("a"))
		s := gpuSlice("a", 0, "")
		for i := range devices {
			d := resourceapi.Device{Name: fmt.Sprint("dev-", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				dra.AttrType:        {StringValue: ptr.To(typ)},
				dra.AttrIndex:       {IntValue: ptr.To(index + int64(i))},
				dra.AttrProductName: {StringValue: ptr.To(product)},
			}}
			if q, err := resource.ParseQuantity(mem); err == nil {
				d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{dra.CapacityMemory: {Value: q}}
			}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
		f.cache.upsertSlice(s)
		dc := gpuClass("gpu.gpuplane.io")
		dc.Spec.Selectors[0].CEL.Expression = classSel
		f.cache.upsertClass(dc)
		var sels []string
		if claimSel != "" {
			sels = append(sels, claimSel)
		}
		cl := gpuClaim("c", class, count, sels...)
		switch mode % 3 {
		case 1:
			x := cl.Spec.Devices.Requests[0].Exactly
			x.AllocationMode, x.Count = resourceapi.DeviceAllocationModeAll, 0
		case 2:
			x := cl.Spec.Devices.Requests[0].Exactly
			cl.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "many", DeviceClassName: class, Selectors: x.Selectors, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
				{Name: "one", DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}
		}
		f.cache.upsertClaim(cl)
		f.cache.upsertPod(claimPod("p", "c"))
		f.cycle()
		f.cache.mu.Lock()
		gpus := len(f.cache.nodes["a"].m.GPUs)
		f.cache.mu.Unlock()
		if gpus > maxClaimGPUs {
			t.Fatalf("node has %d GPUs from its slice, more than %d", gpus, maxClaimGPUs)
		}
		for _, w := range f.api.claimLog() {
			parts := strings.Fields(w)
			if len(parts) != 4 {
				t.Fatalf("claim write %q: want claim, pod, node and devices", w)
			}
			devs := strings.Split(parts[3], ",")
			want := max(count, 1)
			seen := map[string]bool{}
			for _, d := range devs {
				if seen[d] {
					t.Fatalf("device %s allocated twice in %q", d, w)
				}
				seen[d] = true
			}
			if parts[2] != "a" {
				t.Fatalf("claim write %q, want node a", w)
			}
			switch n := int64(len(devs)); mode % 3 {
			case 1:
				if n > int64(devices) {
					t.Fatalf("claim write %q for all devices: %d devices, the slice has %d", w, n, devices)
				}
			case 2:
				if n != want && n != 1 {
					t.Fatalf("claim write %q, want %d or 1 devices", w, want)
				}
			default:
				if n != want {
					t.Fatalf("claim write %q, want %d devices on node a", w, want)
				}
			}
		}
	})
}
