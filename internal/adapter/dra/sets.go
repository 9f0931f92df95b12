package dra

import (
	"context"
	"fmt"
	"math/bits"

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
	// All says the claims ask for every device that matches (their one
	// request for devices has allocationMode: All): the core places the
	// set as every GPU of it on the node the pod gets, and Count is the
	// most GPUs of the set any node has.
	All bool
	// FirstOf, when not empty, says the claims have requests with
	// firstAvailable subrequests: the set is no set of its own but its
	// alternatives, one per choice of a subrequest for each such request,
	// in the order the structured allocator tries them (the first
	// request's choice the most significant). Each is a set of its own,
	// whose Picks name the subrequests it chose.
	FirstOf []*DeviceSet
	Picks   []Pick
	// allReqs counts the requests for all matching devices; allField and
	// allClaim name the last.
	allReqs  int
	allField string
	allClaim int
}

// Pick is the subrequest an alternative chose for a request of one of
// the claims (by index among those the set was made for): the allocator
// names its results Request/Sub.
type Pick struct {
	Claim        int
	Request, Sub string
}

// MaxAlternatives bounds the combinations of subrequests one pod's
// claims may offer the core.
const MaxAlternatives = 16

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
// that do. A request for all the devices that match (allocationMode:
// All) makes the set All; requests with firstAvailable subrequests make
// it a list of alternatives (FirstOf), one per combination of
// subrequests, each evaluated as though its subrequests were the requests.
func EvalDeviceSet(nodes []NodeDevices, specs []ClaimSpec, classes map[string]*resourceapi.DeviceClass, cache *dracel.Cache) *DeviceSet {
	// The requests with subrequests, in the allocator's order, and how
	// many each has.
	type prioritized struct {
		claim, req int
	}
	var lists []prioritized
	combos := 1
	for ci, spec := range specs {
		for ri, r := range spec.Requests {
			if r.Exactly != nil || len(r.FirstAvailable) == 0 {
				continue
			}
			if refusal := RefusedFeature(&r); refusal != "" {
				return failSet(ci, "UnsupportedClaim", refusal, requestField(ri, &r))
			}
			lists = append(lists, prioritized{ci, ri})
			combos *= len(r.FirstAvailable)
			if combos > MaxAlternatives {
				return failSet(ci, "UnsupportedClaim", "%s.firstAvailable: the pod's claims' subrequests make more than %d combinations, more than gpuplane-scheduler weighs: offer fewer subrequests",
					requestField(ri, &r), MaxAlternatives)
			}
		}
	}
	if len(lists) == 0 {
		return evalChoice(nodes, specs, nil, classes, cache)
	}
	out := &DeviceSet{}
	choice := make(map[[2]int]int, len(lists))
	for range combos {
		alt := evalChoice(nodes, specs, choice, classes, cache)
		if alt.Err != "" {
			// A subrequest the allocator cannot serve fails the claim
			// whichever is chosen, as the allocator validates them all.
			return alt
		}
		for _, l := range lists {
			r := &specs[l.claim].Requests[l.req]
			alt.Picks = append(alt.Picks, Pick{Claim: l.claim, Request: r.Name, Sub: r.FirstAvailable[choice[[2]int{l.claim, l.req}]].Name})
		}
		out.FirstOf = append(out.FirstOf, alt)
		// The next combination: the last request's subrequest first.
		for k := len(lists) - 1; k >= 0; k-- {
			key := [2]int{lists[k].claim, lists[k].req}
			if choice[key]++; choice[key] < len(specs[lists[k].claim].Requests[lists[k].req].FirstAvailable) {
				break
			}
			choice[key] = 0
		}
	}
	return out
}

// requestField names a claim's request in a message.
func requestField(ri int, r *resourceapi.DeviceRequest) string {
	return fmt.Sprintf("spec.devices.requests[%d] (%q)", ri, r.Name)
}

func failSet(claim int, code, format string, args ...any) *DeviceSet {
	return &DeviceSet{ErrClaim: claim, ErrCode: code, Err: fmt.Sprintf(format, args...)}
}

// evalChoice is EvalDeviceSet for one choice of subrequests: choice says,
// for each request with subrequests (by claim and request index), the one
// it stands for.
func evalChoice(nodes []NodeDevices, specs []ClaimSpec, choice map[[2]int]int, classes map[string]*resourceapi.DeviceClass, cache *dracel.Cache) *DeviceSet {
	s := &DeviceSet{Masks: make([]uint64, len(nodes))}
	fail := failSet
	ctx := context.Background()
	for ci, spec := range specs {
		for ri, r := range spec.Requests {
			field := requestField(ri, &r)
			if refusal := RefusedFeature(&r); refusal != "" {
				return fail(ci, "UnsupportedClaim", refusal, field)
			}
			// xfield names the fields of what the request asks: its
			// exactly, or the subrequest chosen.
			x, xfield := r.Exactly, field+".exactly"
			if x == nil && len(r.FirstAvailable) == 0 {
				// The API server refuses it; a claim read from anywhere
				// else is held to the same rule.
				return fail(ci, "InvalidResourceClaim", "%s: neither exactly nor firstAvailable is set: set one of them", field)
			}
			if x == nil {
				k := choice[[2]int{ci, ri}]
				sub := &r.FirstAvailable[k]
				x = &resourceapi.ExactDeviceRequest{DeviceClassName: sub.DeviceClassName, Selectors: sub.Selectors, AllocationMode: sub.AllocationMode,
					Count: sub.Count, Tolerations: sub.Tolerations, Capacity: sub.Capacity}
				xfield = fmt.Sprintf("%s.firstAvailable[%d] (%q)", field, k, sub.Name)
			}
			all := x.AllocationMode == resourceapi.DeviceAllocationModeAll
			count := x.Count
			admin := x.AdminAccess != nil && *x.AdminAccess
			if count < 0 {
				// The API server refuses it; a claim read from anywhere
				// else is held to the same rule before the allocator,
				// which sizes its results by it, sees it.
				return fail(ci, "InvalidResourceClaim", "%s.count: %d: ask for at least 1 device", xfield, count)
			}
			if count == 0 || all {
				count = 1
			}
			if admin && x.Capacity != nil && len(x.Capacity.Requests) > 0 {
				return fail(ci, "UnsupportedClaim", "%s.capacity: a request with adminAccess takes no capacity of its devices: drop the capacity requests", xfield)
			}
			if x.Capacity != nil && len(x.Capacity.Requests) > 0 {
				if all {
					return fail(ci, "UnsupportedClaim", "%s.capacity: allocationMode All with capacity requests: gpuplane-scheduler places a capacity request as a share of one GPU: use allocationMode ExactCount with count 1", xfield)
				}
				milli, mem, err := capacityShare(xfield, x, count)
				if err == nil && (s.Count > 0 || len(spec.Requests) > 1 || len(specs) > 1) {
					err = fmt.Errorf("%s.capacity: a capacity request must be the pod's only device request: gpuplane-scheduler places it as a share of one GPU", xfield)
				}
				if err != nil {
					return fail(ci, "UnsupportedClaim", "%v", err)
				}
				s.Share, s.ShareMilli, s.ShareMemMiB = true, milli, mem
			}
			if count > MaxGPUs || int64(s.Count)+count > MaxGPUs {
				return fail(ci, "TooManyDevices", "%s.count: the pod's claims ask for more than %d devices, more than a node publishes: ask for fewer", xfield, MaxGPUs)
			}
			if !admin && !all {
				s.Count += int(count)
			}
			class := classes[x.DeviceClassName]
			if class == nil {
				return fail(ci, "DeviceClassNotFound", "%s.deviceClassName: DeviceClass %q does not exist: create it or name an existing one", xfield, x.DeviceClassName)
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
					return fail(ci, "InvalidSelector", "%s.selectors[%d]: %v", xfield, si, res.Error)
				}
				progs = append(progs, res)
			}
			// selects reports whether a device passes the class's and the
			// request's selectors, or the set's failure.
			selects := func(d *Device, node string) (bool, *DeviceSet) {
				in := dracel.Device{Driver: apidra.DriverName, Attributes: d.Dev.Attributes, Capacity: d.Dev.Capacity, AllowMultipleAllocations: d.Dev.AllowMultipleAllocations}
				for pi, prog := range progs {
					match, _, err := prog.DeviceMatches(ctx, in)
					if err != nil {
						where := fmt.Sprintf("%s.selectors[%d]", xfield, pi-nClass)
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
			// match is selects for a device the allocator may give the
			// request at all.
			match := func(d *Device, node string) (bool, *DeviceSet) {
				if !DeviceAllowed(d.Dev, x.Tolerations) {
					return false, nil
				}
				return selects(d, node)
			}
			if admin {
				// Admin access takes no device (the allocator gives
				// devices in use, and kube-scheduler counts no device
				// of an admin result as allocated): the node only needs
				// count devices that pass, whole or MIG (one for All).
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
				s.adminField, s.adminClaim = xfield, ci
				continue
			}
			if all {
				if bad := s.evalAll(nodes, selects, x.Tolerations, ci, xfield); bad != nil {
					return bad
				}
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
					return fail(ci, "UnsupportedClaim", "%s.count: the request selects MIG devices and asks for %d: gpuplane-scheduler places one MIG device per pod's claims; ask for count 1", xfield, count)
				}
				for ni := range mig {
					s.Masks[ni] |= mig[ni]
				}
				if s.MIGSlices == 0 || smallest.Slices < s.MIGSlices {
					s.MIGSlices, s.MIGProfile = smallest.Slices, smallest.Profile
				}
				s.migReqs++
				s.migField, s.migClaim = xfield, ci
			}
		}
	}
	if s.adminReqs > 0 && s.migReqs+s.wholeReqs+s.allReqs > 0 {
		return fail(s.adminClaim, "UnsupportedClaim", "%s.adminAccess: the pod's claims ask for devices with admin access beside devices for its own use: gpuplane-scheduler places admin access only as all of a pod's device requests; put the other requests in another pod", s.adminField)
	}
	if s.allReqs > 0 && s.migReqs+s.wholeReqs+s.allReqs > 1 {
		return fail(s.allClaim, "UnsupportedClaim", "%s.allocationMode: All beside other requests for devices: gpuplane-scheduler places a request for all matching devices only as the pod's one device request; put the other requests in another pod, or use ExactCount", s.allField)
	}
	if s.migReqs > 0 && s.migReqs+s.wholeReqs > 1 {
		return fail(s.migClaim, "UnsupportedClaim", "%s selects MIG devices beside other requests: gpuplane-scheduler places a pod's claims as whole GPUs or as one MIG device, not both", s.migField)
	}
	return s
}

// evalAll makes s the set of a request for all the devices that match
// (allocationMode: All): on each node every device of gpuplane's driver
// the selectors pass, as the structured allocator collects them before
// it allocates any (a device with binding conditions it cannot give is
// no candidate; a tainted one is, and then fails the allocation). A node
// where one of those the core cannot give (a device tainted against the
// request, a MIG device, one past MaxGPUs) is out of the set; when MIG
// devices put every node with matching devices out, the request fails,
// naming the field. Count is the most GPUs of the set on a node.
func (s *DeviceSet) evalAll(nodes []NodeDevices, selects func(*Device, string) (bool, *DeviceSet), tolerations []resourceapi.DeviceToleration, ci int, xfield string) *DeviceSet {
	migOnly := false
	for ni, n := range nodes {
		var mask uint64
		out, mig := false, false
		for g, d := range n.Devs {
			if d == nil {
				continue
			}
			devs := d.MIGs
			if d.Dev != nil {
				devs = []*Device{d}
			}
			for _, dv := range devs {
				if !Features.DeviceBindingAndStatus && len(dv.Dev.BindingConditions) > 0 || !Features.PartitionableDevices && len(dv.Dev.ConsumesCounters) > 0 {
					continue
				}
				ok, bad := selects(dv, n.Name)
				if bad != nil {
					return bad
				}
				switch {
				case !ok:
				case d.Dev == nil:
					mig = true
				case g >= 64 || Features.DeviceTaints && taintRefuses(dv.Dev, tolerations):
					out = true
				default:
					mask |= 1 << uint(g)
				}
			}
		}
		if mig || out {
			mask = 0
		}
		migOnly = migOnly || mig && !out
		s.Masks[ni] = mask
		s.Count = max(s.Count, bits.OnesCount64(mask))
	}
	if s.Count == 0 && migOnly {
		return failSet(ci, "UnsupportedClaim", "%s.allocationMode: All selects MIG devices: gpuplane-scheduler places one MIG device per pod's claims: use allocationMode ExactCount with count 1, or selectors that match whole GPUs only", xfield)
	}
	s.All = true
	s.allReqs++
	s.allField, s.allClaim = xfield, ci
	return nil
}
