package framework

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
)

// DRAGPUSlice is the ResourceSlice gpuplane-agent's DRA driver publishes
// for a node of gpus GPUs of one product: one pool named after the node,
// each device of type gpu with its index, UUID, product name and memory.
// Tests of the scheduler publish it themselves, as the agent would.
func DRAGPUSlice(node string, gpus int, product string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + dra.DriverName},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	for i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				dra.AttrType:        {StringValue: ptr.To(dra.TypeGPU)},
				dra.AttrIndex:       {IntValue: ptr.To(int64(i))},
				dra.AttrUUID:        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
				dra.AttrProductName: {StringValue: ptr.To(product)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				dra.CapacityMemory: {Value: resource.MustParse("80Gi")},
			},
		})
	}
	return s
}

// DRAGPUClass is a DeviceClass selecting every device of gpuplane's
// driver.
func DRAGPUClass(name string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", dra.DriverName)}}}}}
}

// DRAClaimSpec asks for count devices of a DeviceClass that pass the
// given CEL selectors.
func DRAClaimSpec(class string, count int64, selectors ...string) resourceapi.ResourceClaimSpec {
	x := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	for _, s := range selectors {
		x.Selectors = append(x.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: x}}}}
}
