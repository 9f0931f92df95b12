package model

import (
	"fmt"
	"maps"
	"slices"
)

// What a node counts beyond CPU, memory and GPUs, as kube-scheduler's
// NodeResourcesFit and NodePorts count it.
//
// Node.Allocatable holds the node's allocatable of every other resource
// it advertises, in the node's own integer unit (bytes for
// ephemeral-storage and hugepages-<size>, devices for an extended
// resource), and of pods (ResourcePods). A node without the map (nil)
// checks none of it: a trace or snapshot written before it keeps placing
// as it did. A node with the map takes a pod only when:
//
//   - the pods on it, plus this one, are at most Allocatable["pods"]
//     (missing: 0, so no pod fits);
//   - every resource of Request.Scalars with a quantity above 0 is at
//     most its entry less what the node's pods already hold of it
//     (missing: 0).
//
// Host ports are checked on every node, with or without the map: a pod
// fits only when none of its Request.HostPorts conflicts with a port a
// pod on the node holds (HostPort.Conflicts).
//
// A running pod holds its scalars and ports through its
// Allocation.Request, as it holds its CPU.

// ResourcePods is the entry of Node.Allocatable that bounds the number
// of pods on the node.
const ResourcePods = "pods"

// Bounds of what the core counts: the drivers refuse anything beyond.
const (
	// MaxScalar is the largest quantity of one scalar resource, on a
	// node or in a pod's request (an exbibyte of storage); sums of many
	// stay within int64.
	MaxScalar = int64(1) << 60
	// MaxScalarNames is the most resources one Scalars or Allocatable
	// map may name.
	MaxScalarNames = 128
	// MaxHostPorts is the most host ports one pod may ask for.
	MaxHostPorts = 1024
)

// HostPort is a port of the node a container binds (its hostPort), on
// the protocol and address it names.
type HostPort struct {
	// Protocol is TCP, UDP or SCTP; empty means TCP.
	Protocol string `json:"protocol,omitempty"`
	// IP is the node address the port is bound on; empty means all
	// (0.0.0.0).
	IP   string `json:"ip,omitempty"`
	Port int32  `json:"port"`
}

// AllIPs is the address that binds a port on every address of the node.
const AllIPs = "0.0.0.0"

// Normal returns p with the defaults written out: TCP, 0.0.0.0.
func (p HostPort) Normal() HostPort {
	if p.Protocol == "" {
		p.Protocol = "TCP"
	}
	if p.IP == "" {
		p.IP = AllIPs
	}
	return p
}

// Conflicts reports whether p and q cannot both be bound on one node:
// the same port and protocol, and either on all addresses or on the same
// one (kube-scheduler's NodePorts).
func (p HostPort) Conflicts(q HostPort) bool {
	p, q = p.Normal(), q.Normal()
	return p.Port == q.Port && p.Protocol == q.Protocol && (p.IP == AllIPs || q.IP == AllIPs || p.IP == q.IP)
}

// String renders p as protocol/ip:port.
func (p HostPort) String() string {
	p = p.Normal()
	return fmt.Sprintf("%s/%s:%d", p.Protocol, p.IP, p.Port)
}

// ValidateResources checks a node's Allocatable: at most MaxScalarNames
// entries, each named and from 0 to MaxScalar.
func ValidateResources(field string, m map[string]int64) error {
	if len(m) > MaxScalarNames {
		return fmt.Errorf("%s: at most %d resources, got %d", field, MaxScalarNames, len(m))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "" {
			return fmt.Errorf("%s: a resource name must not be empty", field)
		}
		if v := m[k]; v < 0 || v > MaxScalar {
			return fmt.Errorf("%s[%s]: must be 0 to %d, got %d", field, k, MaxScalar, v)
		}
	}
	return nil
}

// ValidateHostPorts checks a request's host ports: at most MaxHostPorts,
// each from 1 to 65535 on TCP, UDP or SCTP.
func ValidateHostPorts(field string, ports []HostPort) error {
	if len(ports) > MaxHostPorts {
		return fmt.Errorf("%s: at most %d host ports, got %d", field, MaxHostPorts, len(ports))
	}
	for i, p := range ports {
		if p.Port < 1 || p.Port > 65535 {
			return fmt.Errorf("%s[%d].port: must be 1 to 65535, got %d", field, i, p.Port)
		}
		switch p.Protocol {
		case "", "TCP", "UDP", "SCTP":
		default:
			return fmt.Errorf("%s[%d].protocol: must be TCP, UDP or SCTP, got %q", field, i, truncateName(p.Protocol))
		}
	}
	return nil
}

// InReplicas reports whether g counts req in replicas: req asks, through
// the very resource g's node time-slices g under, for replicas of it, so
// that req takes Replicas replicas of g (ShareMilli) wherever the node
// hands them out. Two kinds of request do: whole GPUs of the plain
// nvidia.com/gpu on a GPU time-sliced under that name, where one of them
// is one replica (GPUs with Replicas; elsewhere they are GPUs whole
// GPUs); and replicas of a renamed resource (nvidia.com/gpu.shared: n, a
// share with Replicas), which only GPUs shared under it give. A request
// through claims never does.
func (g *GPU) InReplicas(req *Request) bool {
	return req.Replicas > 0 && req.MIGSlices == 0 && req.DeviceSet == "" && g.MinShareMilli > 0 && g.MIGSlices == 0 &&
		g.ShareResource != "" && g.ShareResource == req.ShareResource
}

// Spans reports whether req, counted in replicas on g (InReplicas), asks
// for whole GPUs of the plain resource (GPUs) and for more replicas than
// g has: the node hands them out from several of its GPUs, as many as it
// takes, and the request takes them so (a DGX H100 time-sliced four ways
// under nvidia.com/gpu advertises 32 of it, and admits a pod of 8 on two
// of its GPUs). A share of a renamed resource never spans: it asks for
// part of one GPU.
func (g *GPU) Spans(req *Request) bool {
	return req.GPUs > 0 && g.InReplicas(req) && g.ShareMilli(req) > g.Capacity()
}

// InReplicasOn reports whether req counts in replicas on n: on any of its
// GPUs (InReplicas). A node's GPUs outside MIG mode are offered alike.
func (n *Node) InReplicasOn(req *Request) bool {
	if req.Replicas == 0 {
		return false
	}
	for g := range n.GPUs {
		if n.GPUs[g].InReplicas(req) {
			return true
		}
	}
	return false
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
