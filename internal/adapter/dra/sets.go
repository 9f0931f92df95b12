package dra

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Device is one GPU a node publishes in a ResourceSlice of gpuplane's
// driver: a whole GPU (Dev), or a GPU in MIG mode, which is no device of
// its own but the MIG devices that consume its shared counters (MIGs).
type Device struct {
	Pool, Name string
	Dev        *resourceapi.Device
	// Slices is, for a MIG device, the compute slices it takes of its
	// GPU's counter set; the GPU's own for a GPU in MIG mode.
	Slices int
	// Profile is a MIG device's profile ("1g.10gb").
	Profile string
	MIGs    []*Device
}

// NodeDevices is one node's GPUs as EvalDeviceSet reads them: Devs[g] is
// GPU g's devices, nil for a GPU that has none.
type NodeDevices struct {
	Name string
	Devs []*Device
}

// DeviceSet is the devices that satisfy one shape of claims: which GPUs
// of each node (aligned with the nodes it was evaluated on) pass their
// device classes' and requests' selectors, and how many devices the
// claims ask for in all. The core places a pod's claims as that many
// whole GPUs of the set. A set is not written once made.
type DeviceSet struct {
	Name  string
	Masks []uint64
	Count int
	// ShareMilli and ShareMemMiB, when the claims ask for capacity, make
	// the set's one device a share of one GPU.
	ShareMilli, ShareMemMiB int64
	Share                   bool
	// Err is why the claims cannot be allocated anywhere, with the index
	// of the claim it concerns among those the set was made for, and a
	// reason code.
	Err      string
	ErrClaim int
	ErrCode  string
	// wholeReqs and migReqs count the requests served by whole GPUs and
	// by MIG devices; migField and migClaim name the last of the latter.
	wholeReqs, migReqs int
	migField           string
	migClaim           int
	// MIGSlices, when not 0, says the claims ask for one MIG device,
	// served by GPUs in MIG mode: the core places it as that many of the
	// GPU's compute slices (the smallest device that passes the
	// selectors), MIGProfile names it.
	MIGSlices  int
	MIGProfile string
	// AdminNodes, when not nil, says the claims' requests all ask for
	// admin access (adminAccess: true): their devices are given without
	// being taken, so the claims ask the core for no GPU (Count 0), only
	// for a node where each request finds its count of devices, in use or
	// not: AdminNodes[i] for node i.
	AdminNodes []bool
	adminReqs  int
	adminField string
	adminClaim int
}

// ClaimSpec is a claim's device requests and constraints, which decide
// the devices it may get; its config does not.
type ClaimSpec struct {
	Requests    []resourceapi.DeviceRequest    `json:"r"`
	Constraints []resourceapi.DeviceConstraint `json:"c,omitempty"`
}

// MaxGPUs bounds the GPUs one node may publish to the scheduler through
// ResourceSlices; devices past it are left out of scheduling.
const MaxGPUs = 64

// maxShareMemoryMiB bounds the memory a capacity request may name (1 PiB).
const maxShareMemoryMiB = 1 << 30

// capacityShare reads the capacity a request asks for: memory (bytes, as
// MiB rounded up) and compute (percent, as milli-GPU). It refuses what
// the core cannot model as a share of one GPU.
func capacityShare(field string, x *resourceapi.ExactDeviceRequest, count int64) (milli, memMiB int64, err error) {
	if count != 1 {
		return 0, 0, fmt.Errorf("%s.exactly.count: %d devices with capacity: gpuplane-scheduler places a capacity request as a share of one GPU: ask for count 1", field, count)
	}
	for name, q := range x.Capacity.Requests {
		switch name {
		case apidra.CapacityMemory:
			v := q.Value()
			if v <= 0 || v>>20 > maxShareMemoryMiB {
				return 0, 0, fmt.Errorf("%s.exactly.capacity.requests[%q]: %s: want a positive amount of at most 1Pi", field, name, q.String())
			}
			memMiB = (v + 1<<20 - 1) >> 20
		case apidra.CapacityCompute:
			v := q.Value()
			if v < 0 || v > 100 {
				return 0, 0, fmt.Errorf("%s.exactly.capacity.requests[%q]: %s: want 0 to 100 percent of the GPU", field, name, q.String())
			}
			milli = v * model.MilliPerGPU / 100
		default:
			return 0, 0, fmt.Errorf("%s.exactly.capacity.requests[%q]: not a capacity gpuplane-scheduler shares; ask for %s or %s", field, name, apidra.CapacityMemory, apidra.CapacityCompute)
		}
	}
	if milli == model.MilliPerGPU {
		// The whole GPU's compute is a whole GPU to the core's books,
		// but the allocator still takes it as a share: keep it a share.
		milli = model.MilliPerGPU - 1
	}
	return milli, memMiB, nil
}

// EvalDeviceSet finds, on every node, the GPUs that satisfy the claims'
// requests: of gpuplane's driver, passing the selectors of the request's
// DeviceClass and then its own, evaluated with the structured allocator's
// CEL environment and cache, and not tainted against the request (a
// NoSchedule or NoExecute device taint none of its tolerations tolerates),
// all as the allocator judges them with Features (DeviceAllowed). A
// selector that fails on a device (a missing attribute, a type error)
// fails the set, as it fails kube-scheduler's allocation. A request that
// needs a feature Features has off (RefusedFeature), or of all
// devices, fails it too. Requests with admin access take no GPU: they
// only narrow the nodes (AdminNodes), and may not be mixed with requests
// that do.
func EvalDeviceSet(nodes []NodeDevices, specs []ClaimSpec, classes map[string]*resourceapi.DeviceClass, cache *dracel.Cache) *DeviceSet {
	s := &DeviceSet{Masks: make([]uint64, len(nodes))}
	fail := func(claim int, code, format string, args ...any) *DeviceSet {
		return &DeviceSet{ErrClaim: claim, ErrCode: code, Err: fmt.Sprintf(format, args...)}
	}
	ctx := context.Background()
	for ci, spec := range specs {
		for ri, r := range spec.Requests {
			field := fmt.Sprintf("spec.devices.requests[%d] (%q)", ri, r.Name)
			if refusal := RefusedFeature(&r); refusal != "" {
				return fail(ci, "UnsupportedClaim", refusal, field)
			}
			x := r.Exactly
			if x.AllocationMode == resourceapi.DeviceAllocationModeAll {
				// The allocator serves All; the core places a count.
				return fail(ci, "UnsupportedClaim", "%s.exactly.allocationMode: All is not supported by gpuplane-scheduler: use ExactCount with a count", field)
			}
			count := x.Count
			admin := x.AdminAccess != nil && *x.AdminAccess
			if count < 0 {
				// The API server refuses it; a claim read from anywhere
				// else is held to the same rule before the allocator,
				// which sizes its results by it, sees it.
				return fail(ci, "InvalidResourceClaim", "%s.exactly.count: %d: ask for at least 1 device", field, count)
			}
			if count == 0 {
				count = 1
			}
			if admin && x.Capacity != nil && len(x.Capacity.Requests) > 0 {
				return fail(ci, "UnsupportedClaim", "%s.exactly.capacity: a request with adminAccess takes no capacity of its devices: drop the capacity requests", field)
			}
			if x.Capacity != nil && len(x.Capacity.Requests) > 0 {
				milli, mem, err := capacityShare(field, x, count)
				if err == nil && (s.Count > 0 || len(spec.Requests) > 1 || len(specs) > 1) {
					err = fmt.Errorf("%s.exactly.capacity: a capacity request must be the pod's only device request: gpuplane-scheduler places it as a share of one GPU", field)
				}
				if err != nil {
					return fail(ci, "UnsupportedClaim", "%v", err)
				}
				s.Share, s.ShareMilli, s.ShareMemMiB = true, milli, mem
			}
			if count > MaxGPUs || int64(s.Count)+count > MaxGPUs {
				return fail(ci, "TooManyDevices", "%s.exactly.count: the pod's claims ask for more than %d devices, more than a node publishes: ask for fewer", field, MaxGPUs)
			}
			if !admin {
				s.Count += int(count)
			}
			class := classes[x.DeviceClassName]
			if class == nil {
				return fail(ci, "DeviceClassNotFound", "%s.exactly.deviceClassName: DeviceClass %q does not exist: create it or name an existing one", field, x.DeviceClassName)
			}
			var progs []dracel.CompilationResult
			for si, sel := range class.Spec.Selectors {
				if sel.CEL == nil {
					continue
				}
				res := cache.GetOrCompile(sel.CEL.Expression)
				if res.Error != nil {
					return fail(ci, "InvalidSelector", "DeviceClass %s: spec.selectors[%d]: %v", class.Name, si, res.Error)
				}
				progs = append(progs, res)
			}
			nClass := len(progs)
			for si, sel := range x.Selectors {
				if sel.CEL == nil {
					continue
				}
				res := cache.GetOrCompile(sel.CEL.Expression)
				if res.Error != nil {
					return fail(ci, "InvalidSelector", "%s.exactly.selectors[%d]: %v", field, si, res.Error)
				}
				progs = append(progs, res)
			}
			// match reports whether a device passes the class's and the
			// request's selectors and taints, or the set's failure.
			match := func(d *Device, node string) (bool, *DeviceSet) {
				if !DeviceAllowed(d.Dev, x.Tolerations) {
					return false, nil
				}
				in := dracel.Device{Driver: apidra.DriverName, Attributes: d.Dev.Attributes, Capacity: d.Dev.Capacity, AllowMultipleAllocations: d.Dev.AllowMultipleAllocations}
				for pi, prog := range progs {
					match, _, err := prog.DeviceMatches(ctx, in)
					if err != nil {
						where := fmt.Sprintf("%s.exactly.selectors[%d]", field, pi-nClass)
						if pi < nClass {
							where = fmt.Sprintf("DeviceClass %s: spec.selectors[%d]", class.Name, pi)
						}
						return false, fail(ci, "SelectorFailed", "%s: %q fails on device %s of node %s: %v: fix the expression (guard an attribute a device may lack with has(...))",
							where, prog.Expression, d.Name, node, err)
					}
					if !match {
						return false, nil
					}
				}
				return true, nil
			}
			if admin {
				// Admin access takes no device (the allocator gives
				// devices in use, and kube-scheduler counts no device
				// of an admin result as allocated): the node only needs
				// count devices that pass, whole or MIG.
				if s.AdminNodes == nil {
					s.AdminNodes = make([]bool, len(nodes))
					for ni := range s.AdminNodes {
						s.AdminNodes[ni] = true
					}
				}
				for ni, n := range nodes {
					var found int64
					for _, d := range n.Devs {
						if d == nil {
							continue
						}
						devs := d.MIGs
						if d.Dev != nil {
							devs = []*Device{d}
						}
						for _, dv := range devs {
							ok, bad := match(dv, n.Name)
							if bad != nil {
								return bad
							}
							if ok {
								found++
							}
						}
					}
					s.AdminNodes[ni] = s.AdminNodes[ni] && found >= count
				}
				s.adminReqs++
				s.adminField, s.adminClaim = field, ci
				continue
			}
			// Whole GPUs that pass make the request one for whole GPUs;
			// only when none does anywhere, its MIG devices count.
			var whole, mig []uint64
			var smallest *Device
			for ni, n := range nodes {
				for g, d := range n.Devs {
					if d == nil || g >= 64 {
						continue
					}
					if d.Dev != nil {
						ok, bad := match(d, n.Name)
						if bad != nil {
							return bad
						}
						if ok {
							if whole == nil {
								whole = make([]uint64, len(nodes))
							}
							whole[ni] |= 1 << uint(g)
						}
						continue
					}
					for _, mg := range d.MIGs {
						ok, bad := match(mg, n.Name)
						if bad != nil {
							return bad
						}
						if !ok {
							continue
						}
						if mig == nil {
							mig = make([]uint64, len(nodes))
						}
						mig[ni] |= 1 << uint(g)
						if smallest == nil || mg.Slices < smallest.Slices {
							smallest = mg
						}
					}
				}
			}
			switch {
			case whole != nil:
				for ni := range whole {
					s.Masks[ni] |= whole[ni]
				}
				s.wholeReqs++
			case mig != nil:
				if count != 1 {
					return fail(ci, "UnsupportedClaim", "%s.exactly.count: the request selects MIG devices and asks for %d: gpuplane-scheduler places one MIG device per pod's claims; ask for count 1", field, count)
				}
				for ni := range mig {
					s.Masks[ni] |= mig[ni]
				}
				if s.MIGSlices == 0 || smallest.Slices < s.MIGSlices {
					s.MIGSlices, s.MIGProfile = smallest.Slices, smallest.Profile
				}
				s.migReqs++
				s.migField, s.migClaim = field, ci
			}
		}
	}
	if s.adminReqs > 0 && s.migReqs+s.wholeReqs > 0 {
		return fail(s.adminClaim, "UnsupportedClaim", "%s.exactly.adminAccess: the pod's claims ask for devices with admin access beside devices for its own use: gpuplane-scheduler places admin access only as all of a pod's device requests; put the other requests in another pod", s.adminField)
	}
	if s.migReqs > 0 && s.migReqs+s.wholeReqs > 1 {
		return fail(s.migClaim, "UnsupportedClaim", "%s selects MIG devices beside other requests: gpuplane-scheduler places a pod's claims as whole GPUs or as one MIG device, not both", s.migField)
	}
	return s
}
