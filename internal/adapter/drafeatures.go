package adapter

import (
	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// claimFeatures is the one table of the DRA features gpuplane-scheduler
// serves. The structured allocator runs with exactly these, the CEL
// environment follows them, and device-set evaluation reads them: a
// request that needs a feature that is off is refused with a reason
// (requestFeatures), and a device the allocator would not give with these
// features is in no device set (featureAllows). Turning a feature on
// needs device-set evaluation to serve it; TestClaimFeaturesTable holds
// the two together.
var claimFeatures = structured.Features{ConsumableCapacity: true, DeviceTaints: true, PartitionableDevices: true}

// celFeatures is the CEL environment claimFeatures implies.
var celFeatures = dracel.Features{EnableConsumableCapacity: claimFeatures.ConsumableCapacity, EnableListTypeAttributes: claimFeatures.ListTypeAttributes}

// requestFeature is a feature a device request may need: its name (the
// field of structured.Features), whether claimFeatures has it on, whether
// a request needs it, and what to tell the user when it is off (with the
// request's field).
type requestFeature struct {
	name    string
	on      bool
	needs   func(r *resourceapi.DeviceRequest) bool
	refusal string
}

// requestFeatures are the features of claimFeatures a single request can
// need; those off are refused in this order.
var requestFeatures = []requestFeature{
	{name: "PrioritizedList", on: claimFeatures.PrioritizedList, needs: func(r *resourceapi.DeviceRequest) bool { return r.Exactly == nil },
		refusal: "%s: firstAvailable is not supported by gpuplane-scheduler: use exactly"},
	{name: "AdminAccess", on: claimFeatures.AdminAccess, needs: func(r *resourceapi.DeviceRequest) bool {
		return r.Exactly != nil && r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess
	}, refusal: "%s.exactly.adminAccess is not supported by gpuplane-scheduler"},
	{name: "ConsumableCapacity", on: claimFeatures.ConsumableCapacity, needs: func(r *resourceapi.DeviceRequest) bool {
		return r.Exactly != nil && r.Exactly.Capacity != nil && len(r.Exactly.Capacity.Requests) > 0
	}, refusal: "%s.exactly.capacity is not supported by gpuplane-scheduler"},
}

// refusedFeature returns the refusal of the first feature a request
// needs that claimFeatures has off, "" when it needs none.
func refusedFeature(r *resourceapi.DeviceRequest) string {
	for _, f := range requestFeatures {
		if !f.on && f.needs(r) {
			return f.refusal
		}
	}
	return ""
}

// featureAllows reports whether the structured allocator, run with
// claimFeatures, may give a device to a request with these tolerations:
// a device with binding conditions needs DeviceBindingAndStatus, one that
// consumes shared counters (a MIG device) PartitionableDevices, and with
// DeviceTaints on a NoSchedule or NoExecute taint the request does not
// tolerate keeps it out.
func featureAllows(d *resourceapi.Device, tolerations []resourceapi.DeviceToleration) bool {
	switch {
	case !claimFeatures.DeviceBindingAndStatus && len(d.BindingConditions) > 0:
		return false
	case !claimFeatures.PartitionableDevices && len(d.ConsumesCounters) > 0:
		return false
	case claimFeatures.DeviceTaints && taintRefuses(d, tolerations):
		return false
	}
	return true
}
