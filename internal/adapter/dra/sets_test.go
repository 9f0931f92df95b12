package dra

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// gpus is one node's whole GPUs, each of the product given.
func gpus(node string, products ...string) NodeDevices {
	n := NodeDevices{Name: node}
	for i, p := range products {
		n.Devs = append(n.Devs, &Device{Pool: node, Name: fmt.Sprint("gpu-", i), Dev: &resourceapi.Device{Name: fmt.Sprint("gpu-", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				apidra.AttrType: {StringValue: ptr.To(apidra.TypeGPU)}, apidra.AttrProductName: {StringValue: ptr.To(p)}}}})
	}
	return n
}

// TestEvalDeviceSet checks which GPUs of which nodes a claim's device set
// holds, and why a set fails.
func TestEvalDeviceSet(t *testing.T) {
	tainted := gpus("b", "H100", "H100")
	tainted.Devs[1].Dev.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	h100 := `device.attributes["gpu.gpuplane.io"].productName == "H100"`
	for _, tt := range []struct {
		name      string
		nodes     []NodeDevices
		class     string
		count     int64
		selectors []string
		// wantMasks per node, or wantCode with wantErr in the error.
		wantMasks []uint64
		wantCode  string
		wantErr   string
	}{
		{name: "every GPU of the driver", nodes: []NodeDevices{gpus("a", "H100", "A100"), gpus("b", "H100")}, count: 2, wantMasks: []uint64{0b11, 0b1}},
		{name: "the request's selector", nodes: []NodeDevices{gpus("a", "H100", "A100"), gpus("b", "A100", "H100")}, count: 1,
			selectors: []string{h100}, wantMasks: []uint64{0b01, 0b10}},
		{name: "a taint not tolerated", nodes: []NodeDevices{tainted}, count: 1, wantMasks: []uint64{0b01}},
		{name: "no GPU on a node", nodes: []NodeDevices{gpus("a", "A100"), {Name: "b"}}, count: 1, selectors: []string{h100}, wantMasks: []uint64{0, 0}},
		{name: "unknown class", nodes: []NodeDevices{gpus("a", "H100")}, class: "none", count: 1, wantCode: "DeviceClassNotFound", wantErr: `DeviceClass "none" does not exist`},
		{name: "selector that fails", nodes: []NodeDevices{gpus("a", "H100")}, count: 1, selectors: []string{`device.attributes["gpu.gpuplane.io"].missing == 1`},
			wantCode: "SelectorFailed", wantErr: "fails on device gpu-0 of node a"},
		{name: "selector that does not compile", nodes: []NodeDevices{gpus("a", "H100")}, count: 1, selectors: []string{`device.(`}, wantCode: "InvalidSelector"},
		{name: "negative count", nodes: []NodeDevices{gpus("a", "H100")}, count: -1, wantCode: "InvalidResourceClaim"},
		{name: "too many devices", nodes: []NodeDevices{gpus("a", "H100")}, count: MaxGPUs + 1, wantCode: "TooManyDevices"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			class := "gpu.gpuplane.io"
			if tt.class != "" {
				class = tt.class
			}
			x := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: tt.count}
			for _, s := range tt.selectors {
				x.Selectors = append(x.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
			}
			spec := ClaimSpec{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: x}}}
			s := EvalDeviceSet(tt.nodes, []ClaimSpec{spec}, map[string]*resourceapi.DeviceClass{"gpu.gpuplane.io": gpuClass()}, dracel.NewCache(8, CELFeatures))
			if tt.wantCode != "" {
				if s.ErrCode != tt.wantCode || !strings.Contains(s.Err, tt.wantErr) {
					t.Fatalf("set error %s %q, want %s containing %q", s.ErrCode, s.Err, tt.wantCode, tt.wantErr)
				}
				return
			}
			if s.Err != "" {
				t.Fatalf("set error %s %q", s.ErrCode, s.Err)
			}
			if fmt.Sprint(s.Masks) != fmt.Sprint(tt.wantMasks) || s.Count != int(tt.count) {
				t.Errorf("masks %b count %d, want %b count %d", s.Masks, s.Count, tt.wantMasks, tt.count)
			}
		})
	}
}
