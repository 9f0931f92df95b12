package placement

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Reasons a node is refused for what it counts beyond CPU, memory and
// GPUs (model/resources.go): kube-scheduler's NodePorts and
// NodeResourcesFit, in the words of their reasons. A host port taken is
// "host port <protocol>/<ip>:<port> in use" (FilterHostPort), a scalar
// resource short "insufficient <name>" (FilterInsufficient).
const FilterPods = "too many pods"

// FilterHostPort is the reason for a node where a pod on it holds a host
// port that conflicts with p, a port of the request.
func FilterHostPort(p model.HostPort) string { return "host port " + p.String() + " in use" }

// FilterInsufficient is the reason for a node short of the named scalar
// resource of a request.
func FilterInsufficient(name string) string { return "insufficient " + name }

// FilterReplicasOneGPU refuses a node that shares its GPUs under a
// renamed resource (nvidia.com/gpu.shared) when a pod asks for more
// replicas of it than one GPU has: such a pod asks for part of one GPU,
// and gpuplane takes its replicas from one GPU, so that the node hands it
// exactly that. A pod asking for whole GPUs of the plain resource on a
// node time-sliced under that name takes its replicas from as many GPUs
// as it needs instead, as its node counts them (model.GPU.Spans).
const FilterReplicasOneGPU = "more replicas than one GPU has (gpuplane takes a pod's replicas from one GPU)"

// portKey is a host port's protocol and number, whatever its address.
type portKey struct {
	protocol string
	port     int32
}

// nodeResources is the free state of what a node counts beyond CPU,
// memory and GPUs. On a node with Allocatable (counted), free holds each
// scalar resource's allocatable less what its pods hold, by name (names
// a pod holds that the node does not advertise go below 0), and maxPods
// its pod allowance; ports counts the host ports its pods hold, on every
// node, and byPort the same by protocol and number.
type nodeResources struct {
	counted bool
	maxPods int
	free    map[string]int64
	names   []string // free's keys, sorted
	ports   map[model.HostPort]int
	byPort  map[portKey]int
}

// init sets up the free state of n with nothing on it.
func (r *nodeResources) init(n *model.Node) {
	if n.Allocatable == nil {
		return
	}
	r.counted = true
	r.maxPods = int(min(n.Allocatable[model.ResourcePods], 1<<30))
	r.free = make(map[string]int64, len(n.Allocatable))
	for k, v := range n.Allocatable {
		if k != model.ResourcePods {
			r.free[k] = v
			r.names = append(r.names, k)
		}
	}
	slices.Sort(r.names)
}

// touches reports whether req changes r's state when assigned.
func (r *nodeResources) touches(req *model.Request) bool {
	return (r.counted && len(req.Scalars) > 0) || len(req.HostPorts) > 0
}

// fits reports whether req fits r on a node with pods pods: room for one
// more pod, every scalar it asks for free and none of its host ports
// taken.
func (r *nodeResources) fits(req *model.Request, pods int) bool {
	return (!r.counted && len(r.byPort) == 0) || r.why(req, pods) == ""
}

// why returns the first of the ports, the pod count and the scalars
// (by name) that refuses req, or "".
func (r *nodeResources) why(req *model.Request, pods int) string {
	if len(r.byPort) > 0 {
		for _, p := range req.HostPorts {
			if r.portTaken(p) {
				return FilterHostPort(p)
			}
		}
	}
	if !r.counted {
		return ""
	}
	if pods >= r.maxPods {
		return FilterPods
	}
	if len(req.Scalars) == 0 {
		return ""
	}
	var short string
	for k, v := range req.Scalars {
		if v > 0 && r.free[k] < v && (short == "" || k < short) {
			short = k
		}
	}
	if short != "" {
		return FilterInsufficient(short)
	}
	return ""
}

// portTaken reports whether p conflicts with a port held on the node:
// one on all addresses conflicts with the same port and protocol on any,
// one on an address with the same on that address or on all.
func (r *nodeResources) portTaken(p model.HostPort) bool {
	p = p.Normal()
	if p.IP == model.AllIPs {
		return r.byPort[portKey{p.Protocol, p.Port}] > 0
	}
	if r.ports[p] > 0 {
		return true
	}
	p.IP = model.AllIPs
	return r.ports[p] > 0
}

// apply adds (sign 1) or takes back (sign -1) req's scalars and ports.
func (r *nodeResources) apply(req *model.Request, sign int64) {
	if r.counted {
		for k, v := range req.Scalars {
			if _, ok := r.free[k]; !ok {
				r.free[k] = 0
				i, _ := slices.BinarySearch(r.names, k)
				r.names = slices.Insert(r.names, i, k)
			}
			r.free[k] -= sign * v
		}
	}
	if len(req.HostPorts) == 0 {
		return
	}
	if r.ports == nil {
		r.ports, r.byPort = map[model.HostPort]int{}, map[portKey]int{}
	}
	for _, p := range req.HostPorts {
		p = p.Normal()
		k := portKey{p.Protocol, p.Port}
		r.ports[p] += int(sign)
		r.byPort[k] += int(sign)
		if r.ports[p] == 0 {
			delete(r.ports, p)
		}
		if r.byPort[k] == 0 {
			delete(r.byPort, k)
		}
	}
}

// appendSignature appends to b what placement reads of r: whether one
// more pod fits, the free scalars by name and the ports held. Nothing
// when the node counts none of it and holds no port, so nodes without
// these keep the signature they had.
func (r *nodeResources) appendSignature(b []byte, pods int) []byte {
	if !r.counted && len(r.ports) == 0 {
		return b
	}
	b = binary.AppendVarint(b, -2)
	if r.counted {
		room := int64(0)
		if pods < r.maxPods {
			room = 1
		}
		b = binary.AppendVarint(b, room)
		b = binary.AppendVarint(b, int64(len(r.names)))
		for _, k := range r.names {
			b = binary.AppendVarint(b, int64(len(k)))
			b = append(b, k...)
			b = binary.AppendVarint(b, r.free[k])
		}
	}
	if len(r.ports) > 0 {
		ports := make([]model.HostPort, 0, len(r.ports))
		for p := range r.ports {
			ports = append(ports, p)
		}
		slices.SortFunc(ports, func(x, y model.HostPort) int {
			return cmp.Or(cmp.Compare(x.Port, y.Port), strings.Compare(x.Protocol, y.Protocol), strings.Compare(x.IP, y.IP))
		})
		b = binary.AppendVarint(b, int64(len(ports)))
		for _, p := range ports {
			b = binary.AppendVarint(b, int64(p.Port))
			b = binary.AppendVarint(b, int64(len(p.Protocol)))
			b = append(b, p.Protocol...)
			b = binary.AppendVarint(b, int64(len(p.IP)))
			b = append(b, p.IP...)
		}
	}
	return b
}

// staticResourcesFit reports whether n could take req were it empty: it
// takes pods, and has each scalar req asks for (ports are held by pods,
// which may go).
func staticResourcesFit(n *model.Node, req *model.Request) bool {
	if n.Allocatable == nil {
		return true
	}
	if n.Allocatable[model.ResourcePods] < 1 {
		return false
	}
	for k, v := range req.Scalars {
		if v > 0 && n.Allocatable[k] < v {
			return false
		}
	}
	return true
}

// appendRequestKey appends req's scalars and ports to a request shape key
// (Placer.shape), in a canonical order.
func appendRequestKey(b []byte, req *model.Request) []byte {
	if len(req.Scalars) == 0 && len(req.HostPorts) == 0 {
		return b
	}
	names := make([]string, 0, len(req.Scalars))
	for k := range req.Scalars {
		names = append(names, k)
	}
	slices.Sort(names)
	b = append(b, "|s"...)
	for _, k := range names {
		b = binary.AppendVarint(b, int64(len(k)))
		b = append(b, k...)
		b = binary.AppendVarint(b, req.Scalars[k])
	}
	b = append(b, "|p"...)
	for _, p := range req.HostPorts {
		p = p.Normal()
		b = binary.AppendVarint(b, int64(p.Port))
		b = binary.AppendVarint(b, int64(len(p.Protocol)))
		b = append(b, p.Protocol...)
		b = binary.AppendVarint(b, int64(len(p.IP)))
		b = append(b, p.IP...)
	}
	return b
}

// tooManyReplicas reports whether req counts in replicas on n and asks
// for more than any of its GPUs has (FilterReplicasOneGPU).
func tooManyReplicas(n *model.Node, req *model.Request) bool {
	if !n.InReplicasOn(req) {
		return false
	}
	for g := range n.GPUs {
		if gp := &n.GPUs[g]; gp.InReplicas(req) && (gp.ShareMilli(req) <= gp.Capacity() || gp.Spans(req)) {
			return false
		}
	}
	return true
}
