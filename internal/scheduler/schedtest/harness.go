package schedtest

import (
	"fmt"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// NodeBuilder builds a model.Node.
type NodeBuilder struct{ n model.Node }

// Node starts a node with CPU (milli) and memory (MiB).
func Node(name string, milliCPU, memMiB int64) *NodeBuilder {
	return &NodeBuilder{n: model.Node{Name: name, MilliCPU: milliCPU, MemoryMiB: memMiB}}
}

// GPUs adds count GPUs of a model.
func (b *NodeBuilder) GPUs(count int, gpuModel string) *NodeBuilder {
	for range count {
		b.n.GPUs = append(b.n.GPUs, model.GPU{Index: len(b.n.GPUs), Model: gpuModel})
	}
	return b
}

// Label sets a label.
func (b *NodeBuilder) Label(k, v string) *NodeBuilder {
	if b.n.Labels == nil {
		b.n.Labels = map[string]string{}
	}
	b.n.Labels[k] = v
	return b
}

// MIG adds count GPUs of a model in MIG mode with slices compute slices.
func (b *NodeBuilder) MIG(count, slices int, gpuModel string) *NodeBuilder {
	for range count {
		b.n.GPUs = append(b.n.GPUs, model.GPU{Index: len(b.n.GPUs), Model: gpuModel, MIGSlices: slices})
	}
	return b
}

// Taint adds a taint.
func (b *NodeBuilder) Taint(key, value, effect string) *NodeBuilder {
	b.n.Taints = append(b.n.Taints, model.Taint{Key: key, Value: value, Effect: effect})
	return b
}

// Coming marks the node as yet to register its GPUs (model.Node.Coming).
func (b *NodeBuilder) Coming() *NodeBuilder { b.n.Coming = true; return b }

// Obj returns the node.
func (b *NodeBuilder) Obj() model.Node { return b.n }

// Cluster returns count nodes named prefix-i, each with gpus GPUs.
func Cluster(prefix string, count, gpus int, milliCPU, memMiB int64) []model.Node {
	out := make([]model.Node, count)
	for i := range out {
		out[i] = Node(fmt.Sprintf("%s-%d", prefix, i), milliCPU, memMiB).GPUs(gpus, "A100").Obj()
	}
	return out
}

// GroupBuilder builds a model.PodGroup.
type GroupBuilder struct{ g model.PodGroup }

// Group starts a pod group.
func Group(name string) *GroupBuilder { return &GroupBuilder{g: model.PodGroup{Name: name}} }

// Queue sets the group's queue.
func (b *GroupBuilder) Queue(q string) *GroupBuilder { b.g.Queue = q; return b }

// Priority sets the group's priority.
func (b *GroupBuilder) Priority(p int32) *GroupBuilder { b.g.Priority = p; return b }

// Created sets the group's creation time.
func (b *GroupBuilder) Created(t int64) *GroupBuilder { b.g.CreatedAt = t; return b }

// MinMember sets the gang size.
func (b *GroupBuilder) MinMember(n int) *GroupBuilder { b.g.MinMember = n; return b }

// NonPreemptible marks the group.
func (b *GroupBuilder) NonPreemptible() *GroupBuilder { b.g.NonPreemptible = true; return b }

// Pods adds count pods asking for req, named GROUP-i.
func (b *GroupBuilder) Pods(count int, req model.Request) *GroupBuilder {
	for range count {
		b.g.Pods = append(b.g.Pods, model.Pod{Name: fmt.Sprintf("%s-%d", b.g.Name, len(b.g.Pods)), Request: req})
	}
	return b
}

// Obj returns the group.
func (b *GroupBuilder) Obj() model.PodGroup { return b.g }

// GPU returns a request for n whole GPUs with cpu milli-CPU.
func GPU(n int, cpu int64) model.Request { return model.Request{GPUs: n, MilliCPU: cpu} }

// Share returns a request for milli of one GPU.
func Share(milli, cpu int64) model.Request { return model.Request{GPUMilli: milli, MilliCPU: cpu} }

// Confined returns req limited to nodes labelled key=value, tolerating a
// key=value taint (a pool of nodes reserved that way).
func Confined(req model.Request, key, value string) model.Request {
	sel := map[string]string{key: value}
	for k, v := range req.NodeSelector {
		sel[k] = v
	}
	req.NodeSelector = sel
	req.Tolerations = append(append([]model.Toleration(nil), req.Tolerations...), model.Toleration{Key: key, Value: value})
	return req
}

// OnNodes sorts running onto nodes for model.Snapshot.RunningByNode
// (model.ByNode), each node's pods in a new slice; it panics when one
// names a node not among nodes. A test that changes running calls it again
// for the next cycle, as a driver gives a changed node a new slice.
func OnNodes(nodes []model.Node, running ...model.Allocation) [][]model.Allocation {
	out, err := model.ByNode(nodes, running)
	if err != nil {
		panic(err)
	}
	return out
}

// Running returns a copy of snap's running allocations in one list, node
// by node; changed, it goes back with OnNodes.
func Running(snap *model.Snapshot) []model.Allocation {
	var out []model.Allocation
	for a := range snap.AllRunning() {
		out = append(out, *a)
	}
	return out
}

// Harness runs cycles on a snapshot it keeps up to date.
type Harness struct {
	Sched *scheduler.Scheduler
	Snap  model.Snapshot
	// Log holds every cycle's decisions in order.
	Log []model.Decisions
	now int64
}

// NewHarness returns a harness for snap with a scheduler using cfg.
func NewHarness(snap model.Snapshot, cfg scheduler.Config) (*Harness, error) {
	s, err := scheduler.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Harness{Sched: s, Snap: snap}, nil
}

// Cycle runs one cycle, records and applies its decisions. Pods it binds
// start at the snapshot's Now, or at the count of cycles run when that is
// later (tests that leave Now at 0 see starts in cycle order).
func (h *Harness) Cycle() (model.Decisions, error) {
	d, err := h.Sched.Cycle(&h.Snap)
	if err != nil {
		return d, err
	}
	h.Log = append(h.Log, d)
	h.now++
	if err := model.Apply(&h.Snap, &d, max(h.now, h.Snap.Now)); err != nil {
		return d, err
	}
	return d, nil
}

// Planned returns every placement d decided: its binds, then the plans of
// the groups it holds for their victims (bound by a later cycle).
func Planned(d *model.Decisions) []model.Bind {
	out := append([]model.Bind(nil), d.Binds...)
	for _, h := range d.Holds {
		out = append(out, h.Plan...)
	}
	return out
}

// Topology sets the group's placement by the network's topology.
func (b *GroupBuilder) Topology(t model.GangTopology) *GroupBuilder { b.g.Topology = &t; return b }

// Slice names the slice of the group's last count pods (model.Pod.Slice).
func (b *GroupBuilder) Slice(count int, name string) *GroupBuilder {
	for k := len(b.g.Pods) - count; k < len(b.g.Pods); k++ {
		b.g.Pods[k].Slice = name
	}
	return b
}

// Topology levels of the clusters TopologyCluster lays out, widest first.
const (
	ZoneKey  = "topology.kubernetes.io/zone"
	BlockKey = "example.com/block"
	RackKey  = "example.com/rack"
	HostKey  = "kubernetes.io/hostname"
)

// TopologyLevels are the four levels of a TopologyCluster.
var TopologyLevels = []string{ZoneKey, BlockKey, RackKey, HostKey}

// TopologyCluster returns zones x blocks x racks x perRack nodes with gpus
// GPUs each, named z<i>-b<j>-r<k>-n<l>, whose topology labels (in
// Node.Domains, as the adapter passes labels that only name topology)
// name their zone z<i>, block z<i>-b<j>, rack z<i>-b<j>-r<k> and host.
func TopologyCluster(zones, blocks, racks, perRack, gpus int) []model.Node {
	var out []model.Node
	for z := range zones {
		for b := range blocks {
			for r := range racks {
				for n := range perRack {
					name := fmt.Sprintf("z%d-b%d-r%d-n%d", z, b, r, n)
					node := Node(name, 128000, 1<<20).GPUs(gpus, "H100").Obj()
					node.Domains = map[string]string{ZoneKey: fmt.Sprintf("z%d", z), BlockKey: fmt.Sprintf("z%d-b%d", z, b),
						RackKey: fmt.Sprintf("z%d-b%d-r%d", z, b, r), HostKey: name}
					out = append(out, node)
				}
			}
		}
	}
	return out
}
