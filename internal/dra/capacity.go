package dra

import (
	"fmt"
	"maps"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/ledger"
)

// memoryStep is the granularity of a GPU memory share: requests are
// rounded up to whole GiB, as the allocator applies the request policy.
const memoryStep = 1 << 30

// shareGPUs publishes every whole GPU for consumable capacity
// (SharedCapacity).
func (inv *inventory) shareGPUs() {
	for _, d := range inv.devices {
		if d.mig != nil {
			continue
		}
		d.multi = ptr.To(true)
		maps.Copy(d.capacity, SharedCapacity(d.capacity[apidra.CapacityMemory].Value))
	}
}

// SharedCapacity is the memory and compute capacities of a whole GPU of
// mem bytes published for consumable capacity: several claims may be
// allocated the GPU, each consuming part of its memory (whole GiB; a claim
// that asks for none takes all of it, so a plain claim still gets the GPU
// alone) and optionally a percent of its compute (none unless asked).
func SharedCapacity(mem resource.Quantity) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		apidra.CapacityMemory: {Value: mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    ptr.To(mem.DeepCopy()),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(memoryStep, resource.BinarySI), Step: resource.NewQuantity(memoryStep, resource.BinarySI)},
		}},
		apidra.CapacityCompute: {Value: *resource.NewQuantity(100, resource.DecimalSI), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    resource.NewQuantity(0, resource.DecimalSI),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(0, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)},
		}},
	}
}

// preparedShare is the part of a GPU a claim was allocated by consumable
// capacity.
type preparedShare struct {
	// ShareID is the allocation's share of the device.
	ShareID string `json:"shareID,omitempty"`
	// MemoryBytes of the GPU's DeviceBytes are the claim's.
	MemoryBytes int64 `json:"memoryBytes"`
	DeviceBytes int64 `json:"deviceBytes"`
	// ComputePercent of the GPU's compute is the claim's; 0 for none.
	ComputePercent int64 `json:"computePercent,omitempty"`
}

// shareOf reads the consumed capacity of an allocation result: nil for
// a device allocated whole.
func shareOf(r resourceapi.DeviceRequestAllocationResult, dev *device) (*preparedShare, error) {
	if r.ShareID == nil && len(r.ConsumedCapacity) == 0 {
		return nil, nil
	}
	if dev.multi == nil || !*dev.multi {
		return nil, fmt.Errorf("device %s was allocated a share (consumedCapacity) but is not published for shared allocation (start the driver with shared GPUs)", r.Device)
	}
	memCap := dev.capacity[apidra.CapacityMemory].Value
	total := memCap.Value()
	s := &preparedShare{DeviceBytes: total, MemoryBytes: total}
	if r.ShareID != nil {
		s.ShareID = string(*r.ShareID)
	}
	for name, q := range r.ConsumedCapacity {
		switch name {
		case apidra.CapacityMemory:
			s.MemoryBytes = q.Value()
		case apidra.CapacityCompute:
			s.ComputePercent = q.Value()
		default:
			return nil, fmt.Errorf("device %s: consumedCapacity[%q]: not a capacity this driver publishes; want %s or %s", r.Device, name, apidra.CapacityMemory, apidra.CapacityCompute)
		}
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("device %s: %w", r.Device, err)
	}
	return s, nil
}

// check bounds a share; nil is a whole device.
func (s *preparedShare) check() error {
	switch {
	case s == nil:
		return nil
	case s.DeviceBytes <= 0:
		return fmt.Errorf("share: device memory %d bytes: must be positive", s.DeviceBytes)
	case s.MemoryBytes <= 0 || s.MemoryBytes > s.DeviceBytes:
		return fmt.Errorf("consumedCapacity[%s]: %d bytes: must be more than 0 and at most the GPU's %d", apidra.CapacityMemory, s.MemoryBytes, s.DeviceBytes)
	case s.ComputePercent < 0 || s.ComputePercent > 100:
		return fmt.Errorf("consumedCapacity[%s]: %d: must be 0 to 100 percent", apidra.CapacityCompute, s.ComputePercent)
	}
	return nil
}

// hold is the ledger's record of a whole GPU or a share of it.
func (s *preparedShare) hold(uuid string) ledger.Hold {
	if s == nil {
		return ledger.Hold{Device: uuid}
	}
	return ledger.Hold{Device: uuid, Share: s.MemoryBytes, Of: s.DeviceBytes}
}

// env tells the containers their share, as the device plugin's
// fractional GPUs do (GPUPLANE_GPU_MEMORY_LIMIT_MIB,
// GPUPLANE_GPU_FRACTION).
func (s *preparedShare) env(_ int) []string {
	if s == nil {
		return nil
	}
	out := []string{deviceplugin.EnvGPUMemoryLimit + "=" + strconv.FormatInt(s.MemoryBytes>>20, 10)}
	if s.ComputePercent > 0 {
		out = append(out, deviceplugin.EnvGPUFraction+"="+strconv.FormatFloat(float64(s.ComputePercent)/100, 'f', -1, 64))
	}
	return out
}
