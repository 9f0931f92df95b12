package dra

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Features is the one table of the DRA features gpuplane-scheduler
// serves. The structured allocator runs with exactly these, the CEL
// environment follows them, and device-set evaluation reads them: a
// request that needs a feature that is off is refused with a reason
// (RequestFeatures), and a device the allocator would not give with these
// features is in no device set (DeviceAllowed). Turning a feature on
// needs device-set evaluation to serve it; TestClaimFeaturesTable holds
// the two together.
var Features = structured.Features{AdminAccess: true, ConsumableCapacity: true, DeviceTaints: true, PartitionableDevices: true, PrioritizedList: true}

// CELFeatures is the CEL environment Features implies.
var CELFeatures = dracel.Features{EnableConsumableCapacity: Features.ConsumableCapacity, EnableListTypeAttributes: Features.ListTypeAttributes}

// RequestFeature is a feature a device request may need: its name (the
// field of structured.Features), whether Features has it on, whether
// a request needs it, and what to tell the user when it is off (with the
// request's field).
type RequestFeature struct {
	Name    string
	On      bool
	Needs   func(r *resourceapi.DeviceRequest) bool
	Refusal string
}

// RequestFeatures are the features of Features a single request can
// need; those off are refused in this order.
var RequestFeatures = []RequestFeature{
	{Name: "PrioritizedList", On: Features.PrioritizedList, Needs: func(r *resourceapi.DeviceRequest) bool { return r.Exactly == nil },
		Refusal: "%s: firstAvailable is not supported by gpuplane-scheduler: use exactly"},
	{Name: "AdminAccess", On: Features.AdminAccess, Needs: func(r *resourceapi.DeviceRequest) bool {
		return r.Exactly != nil && r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess
	}, Refusal: "%s.exactly.adminAccess is not supported by gpuplane-scheduler"},
	{Name: "ConsumableCapacity", On: Features.ConsumableCapacity, Needs: func(r *resourceapi.DeviceRequest) bool {
		return r.Exactly != nil && r.Exactly.Capacity != nil && len(r.Exactly.Capacity.Requests) > 0
	}, Refusal: "%s.exactly.capacity is not supported by gpuplane-scheduler"},
}

// RefusedFeature returns the refusal of the first feature a request
// needs that Features has off, "" when it needs none.
func RefusedFeature(r *resourceapi.DeviceRequest) string {
	for _, f := range RequestFeatures {
		if !f.On && f.Needs(r) {
			return f.Refusal
		}
	}
	return ""
}

// DeviceAllowed reports whether the structured allocator, run with
// Features, may give a device to a request with these tolerations:
// a device with binding conditions needs DeviceBindingAndStatus, one that
// consumes shared counters (a MIG device) PartitionableDevices, and with
// DeviceTaints on a NoSchedule or NoExecute taint the request does not
// tolerate keeps it out.
func DeviceAllowed(d *resourceapi.Device, tolerations []resourceapi.DeviceToleration) bool {
	switch {
	case !Features.DeviceBindingAndStatus && len(d.BindingConditions) > 0:
		return false
	case !Features.PartitionableDevices && len(d.ConsumesCounters) > 0:
		return false
	case Features.DeviceTaints && taintRefuses(d, tolerations):
		return false
	}
	return true
}

// taintRefuses reports whether a device carries a taint with effect
// NoSchedule or NoExecute that none of a request's tolerations tolerates:
// the structured allocator (with DeviceTaints on, as kube-scheduler runs
// it) then never gives the device to that request, so it is no GPU of the
// request's set either. Other effects (None, or one this version does not
// know) do not prevent allocation, as for the allocator.
func taintRefuses(d *resourceapi.Device, tolerations []resourceapi.DeviceToleration) bool {
	for _, t := range d.Taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol resourceapi.DeviceToleration) bool { return resourceclaim.ToleratesTaint(tol, t) }) {
			return true
		}
	}
	return false
}
