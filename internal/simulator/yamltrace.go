package simulator

import (
	"fmt"
	"io"

	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// YAMLTrace is our own small trace format, for tests and examples:
//
//	nodes:
//	- {name: a100, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: A100, nvlink: true}
//	queues:
//	- {name: team-a, guaranteed: {gpuMilli: 8000}, weight: 1}
//	pods:
//	- {name: train, queue: team-a, count: 4, minMember: 4, gpus: 1, milliCPU: 8000, createdAt: 0, duration: 3600}
//
// A pods entry with count > 1 and minMember > 0 is one gang of count pods;
// without minMember it is count independent pods named NAME-i.
type YAMLTrace struct {
	Nodes  []YAMLNode    `json:"nodes"`
	Queues []model.Queue `json:"queues,omitempty"`
	Pods   []YAMLPod     `json:"pods"`
}

// YAMLNode describes count identical nodes.
type YAMLNode struct {
	Name         string            `json:"name"`
	Count        int               `json:"count,omitempty"`
	MilliCPU     int64             `json:"milliCPU"`
	MemoryMiB    int64             `json:"memoryMiB"`
	GPUs         int               `json:"gpus,omitempty"`
	GPUModel     string            `json:"gpuModel,omitempty"`
	GPUMemoryMiB int64             `json:"gpuMemoryMiB,omitempty"`
	MIGSlices    int               `json:"migSlices,omitempty"`
	NVLink       bool              `json:"nvlink,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// YAMLPod describes count pods of one shape.
type YAMLPod struct {
	Name         string   `json:"name"`
	Count        int      `json:"count,omitempty"`
	Queue        string   `json:"queue,omitempty"`
	MinMember    int      `json:"minMember,omitempty"`
	Priority     int32    `json:"priority,omitempty"`
	CreatedAt    int64    `json:"createdAt,omitempty"`
	Duration     int64    `json:"duration,omitempty"`
	MilliCPU     int64    `json:"milliCPU,omitempty"`
	MemoryMiB    int64    `json:"memoryMiB,omitempty"`
	GPUs         int      `json:"gpus,omitempty"`
	GPUMilli     int64    `json:"gpuMilli,omitempty"`
	GPUMemoryMiB int64    `json:"gpuMemoryMiB,omitempty"`
	MIGSlices    int      `json:"migSlices,omitempty"`
	GPUModels    []string `json:"gpuModels,omitempty"`
}

// ReadYAMLTrace parses our YAML trace format; unknown fields are errors.
func ReadYAMLTrace(name string, r io.Reader) (*Trace, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading trace %s: %w", name, err)
	}
	var y YAMLTrace
	if err := yaml.UnmarshalStrict(data, &y); err != nil {
		return nil, fmt.Errorf("parsing trace %s: %w", name, err)
	}
	tr := &Trace{Source: name, Queues: y.Queues}
	for i, n := range y.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("trace %s: nodes[%d].name: must not be empty", name, i)
		}
		if n.MilliCPU < 0 || n.MemoryMiB < 0 || n.GPUs < 0 || n.Count < 0 {
			return nil, fmt.Errorf("trace %s: nodes[%d] (%s): quantities must be >= 0", name, i, n.Name)
		}
		if n.GPUs > MaxNodeGPUs || n.MIGSlices > 7 {
			return nil, fmt.Errorf("trace %s: nodes[%d] (%s): a node has at most %d GPUs of at most 7 MIG slices, got %d of %d", name, i, n.Name, MaxNodeGPUs, n.GPUs, n.MIGSlices)
		}
		count := max(n.Count, 1)
		if count > MaxTraceNodes-len(tr.Nodes) {
			return nil, fmt.Errorf("trace %s: nodes[%d].count: the trace would have more than %d nodes", name, i, MaxTraceNodes)
		}
		for k := range count {
			nd := model.Node{Name: n.Name, MilliCPU: n.MilliCPU, MemoryMiB: n.MemoryMiB, Labels: n.Labels}
			if count > 1 {
				nd.Name = fmt.Sprintf("%s-%d", n.Name, k)
			}
			for g := range n.GPUs {
				nd.GPUs = append(nd.GPUs, model.GPU{Index: g, Model: n.GPUModel, MemoryMiB: n.GPUMemoryMiB, MIGSlices: n.MIGSlices, NUMANode: g * 2 / max(n.GPUs, 1)})
			}
			if n.NVLink && n.GPUs > 1 {
				nd.Topology = gpu.NewTopology(n.GPUs)
				for a := range n.GPUs {
					for b := a + 1; b < n.GPUs; b++ {
						nd.Topology.Set(a, b, gpu.Link{NVLinks: 12})
					}
				}
			}
			tr.Nodes = append(tr.Nodes, nd)
		}
	}
	for i, p := range y.Pods {
		if p.Name == "" {
			return nil, fmt.Errorf("trace %s: pods[%d].name: must not be empty", name, i)
		}
		if p.GPUMilli < 0 || p.GPUMilli >= model.MilliPerGPU && p.GPUs == 0 && p.GPUMilli != 0 {
			return nil, fmt.Errorf("trace %s: pods[%d].gpuMilli: must be in 1..999 (use gpus for whole GPUs), got %d", name, i, p.GPUMilli)
		}
		if p.Count < 0 || p.MinMember < 0 || p.MinMember > max(p.Count, 1) {
			return nil, fmt.Errorf("trace %s: pods[%d] (%s): need 0 <= minMember <= count", name, i, p.Name)
		}
		req := model.Request{MilliCPU: p.MilliCPU, MemoryMiB: p.MemoryMiB, GPUs: p.GPUs, GPUMilli: p.GPUMilli,
			GPUMemoryMiB: p.GPUMemoryMiB, MIGSlices: p.MIGSlices, GPUModels: p.GPUModels}
		if req.GPUs > 0 {
			req.GPUMilli = 0
		}
		count := max(p.Count, 1)
		if count > MaxTracePods-len(tr.Pods) {
			return nil, fmt.Errorf("trace %s: pods[%d].count: the trace would have more than %d pods", name, i, MaxTracePods)
		}
		for k := range count {
			tp := TracePod{Name: p.Name, Request: req, CreatedAt: p.CreatedAt, Duration: p.Duration, Queue: p.Queue, Priority: p.Priority}
			if count > 1 {
				tp.Name = fmt.Sprintf("%s-%d", p.Name, k)
			}
			if p.MinMember > 0 {
				tp.Group, tp.MinMember = p.Name, p.MinMember
			}
			tr.Pods = append(tr.Pods, tp)
		}
	}
	sortByCreation(tr.Pods)
	return tr, nil
}
