package simulator

import (
	"fmt"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Bounds on what a trace may describe: well above the largest GPU
// clusters and their busiest years, low enough that a corrupt or hostile
// file is refused with an error instead of exhausting memory.
const (
	// MaxTraceNodes is the most nodes a trace may have.
	MaxTraceNodes = 100_000
	// MaxTracePods is the most pods a trace may have.
	MaxTracePods = 10_000_000
	// MaxNodeGPUs is the most GPUs one node of a trace may have.
	MaxNodeGPUs = gpunode.MaxGPUs
)

// Trace is a cluster and the pods that arrive at it.
type Trace struct {
	// Source names where the trace came from, for reports.
	Source string
	Nodes  []model.Node
	Pods   []TracePod
	Queues []model.Queue
}

// ShareAsReplicas makes the nodes hand out shares as a Kubernetes node
// does: each GPU not in MIG mode is time-sliced (or MPS-shared) into
// replicas, one per pod, so a share takes at least 1/replicas of its GPU
// and a GPU holds at most replicas pods. 0 leaves shares as the trace
// states them.
func (t *Trace) ShareAsReplicas(replicas int) {
	if replicas <= 0 {
		return
	}
	for i := range t.Nodes {
		for g := range t.Nodes[i].GPUs {
			if gp := &t.Nodes[i].GPUs[g]; gp.MIGSlices == 0 {
				gp.MinShareMilli = model.MilliPerGPU / int64(replicas)
			}
		}
	}
	t.Source += fmt.Sprintf(" (GPUs shared as %d replicas)", replicas)
}

// TracePod is one pod of a trace.
type TracePod struct {
	Name    string
	Request model.Request
	// CreatedAt and DeletedAt are seconds from the trace start; DeletedAt
	// is 0 when unknown (the pod runs to the end).
	CreatedAt int64
	DeletedAt int64
	// Duration overrides DeletedAt-CreatedAt as the run time once placed.
	Duration int64
	Queue    string
	Group    string
	// MinMember is the gang size of Group (0: every pod of the group).
	MinMember int
	Priority  int32
	// QoS is the trace's quality-of-service class, when it has one
	// (openb: LS, BE, Burstable, Guaranteed).
	QoS string
	// CheckpointEvery is how often the pod's job saves its progress, in
	// trace seconds of its run (0: never): evicted, it loses the work
	// since its last checkpoint and resumes from there. The core reads
	// the last one (model.Allocation.LastCheckpoint) to choose victims.
	CheckpointEvery int64
	// Topology places the pod's gang by the network (the same value on
	// every pod of a group; nil: anywhere); Slice names the pod's
	// sub-group for a topology that places slices by sub-group.
	Topology *model.GangTopology
	Slice    string
	// MinRuntime is the least time, in seconds, the pod's group runs
	// before it may be evicted (its priority class's,
	// model.PodGroup.MinRuntime); the queue may set one too.
	MinRuntime int64
	// Movable says the pod's group opted in to moves for defragmentation
	// (model.PodGroup.Movable), the same value on every pod of a group.
	Movable bool
}

// RunTime is how long the pod runs once started; 0 means forever.
func (p *TracePod) RunTime() int64 {
	switch {
	case p.Duration > 0:
		return p.Duration
	case p.DeletedAt > p.CreatedAt:
		return p.DeletedAt - p.CreatedAt
	}
	return 0
}

// GPUCapacityMilli is the total milli-GPU of the trace's nodes.
func (t *Trace) GPUCapacityMilli() int64 {
	var s int64
	for i := range t.Nodes {
		for _, g := range t.Nodes[i].GPUs {
			s += g.Capacity()
		}
	}
	return s
}
