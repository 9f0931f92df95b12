package dra

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// ClassLister serves the structured allocator DeviceClasses by name. The
// map is read, never written.
type ClassLister map[string]*resourceapi.DeviceClass

// List returns every class.
func (l ClassLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, dc := range l {
		out = append(out, dc)
	}
	return out, nil
}

// Get returns a class, or a NotFound error.
func (l ClassLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if dc := l[name]; dc != nil {
		return dc, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// Allocate runs the structured allocator, with Features, for claims on
// one node over the node's slices, narrowed to the devices in only
// ("pool/name") when only is not nil: nil results when the claims do not
// fit those devices (their constraints refuse them, or too few are
// free), every claim allocated otherwise.
func Allocate(ctx context.Context, node *corev1.Node, nodeSlices []*resourceapi.ResourceSlice, only sets.Set[string], classes ClassLister,
	allocated structured.AllocatedState, claims []*resourceapi.ResourceClaim, cel *dracel.Cache) ([]resourceapi.AllocationResult, error) {
	in := nodeSlices
	if only != nil {
		in = make([]*resourceapi.ResourceSlice, 0, len(nodeSlices))
		for _, s := range nodeSlices {
			cp := *s
			cp.Spec.Devices = nil
			for _, d := range s.Spec.Devices {
				if only.Has(s.Spec.Pool.Name + "/" + d.Name) {
					cp.Spec.Devices = append(cp.Spec.Devices, d)
				}
			}
			in = append(in, &cp)
		}
	}
	a, err := structured.NewAllocator(ctx, Features, allocated, classes, in, cel)
	if err != nil {
		return nil, fmt.Errorf("creating the structured allocator: %w", err)
	}
	return a.Allocate(ctx, node, defaultCounts(claims))
}

// defaultCounts applies the API server's default to claims read from
// elsewhere: an ExactCount request or subrequest of count 0 asks for one device, as
// EvalDeviceSet counts it. The allocator would otherwise allocate it no
// device at all, on no node. Claims that need no default are passed as
// they are; the others are copied, never changed in place.
func defaultCounts(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	out := claims
	copied := false
	for i, c := range claims {
		if !needsCountDefault(c) {
			continue
		}
		if !copied {
			out, copied = slices.Clone(claims), true
		}
		cp := c.DeepCopy()
		for _, r := range cp.Spec.Devices.Requests {
			if x := r.Exactly; x != nil && x.AllocationMode == resourceapi.DeviceAllocationModeExactCount && x.Count == 0 {
				x.Count = 1
			}
			for k := range r.FirstAvailable {
				if sub := &r.FirstAvailable[k]; sub.AllocationMode == resourceapi.DeviceAllocationModeExactCount && sub.Count == 0 {
					sub.Count = 1
				}
			}
		}
		out[i] = cp
	}
	return out
}

func needsCountDefault(c *resourceapi.ResourceClaim) bool {
	for _, r := range c.Spec.Devices.Requests {
		if x := r.Exactly; x != nil && x.AllocationMode == resourceapi.DeviceAllocationModeExactCount && x.Count == 0 {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if sub.AllocationMode == resourceapi.DeviceAllocationModeExactCount && sub.Count == 0 {
				return true
			}
		}
	}
	return false
}

// AllocatedState is what the claims allocated on a node hold, as the
// structured allocator takes it: whole devices, the shares of devices
// allocated more than once, and the capacity those shares consume; not
// the devices given with admin access, which hold nothing.
func AllocatedState(allocs []*resourceapi.AllocationResult) structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, alloc := range allocs {
		for _, r := range alloc.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				// A device given with admin access stays free for others,
				// as kube-scheduler counts it.
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				st.AllocatedDevices.Insert(id)
				continue
			}
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if len(r.ConsumedCapacity) > 0 {
				st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
		}
	}
	return st
}
