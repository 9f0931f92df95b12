package labels

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// TopologyLabeler produces the topology annotation (api/gpunode). It adds no labels.
type TopologyLabeler struct{}

var (
	_ Labeler   = (*TopologyLabeler)(nil)
	_ Annotator = (*TopologyLabeler)(nil)
)

// NewTopologyLabeler returns a TopologyLabeler.
func NewTopologyLabeler() (*TopologyLabeler, error) { return &TopologyLabeler{}, nil }

// Name implements Labeler.
func (*TopologyLabeler) Name() string { return "topology" }

// Label implements Labeler; topology is an annotation only.
func (*TopologyLabeler) Label(*Input, Labels) error { return nil }

// Annotate implements Annotator.
func (*TopologyLabeler) Annotate(in *Input, out Labels) error {
	if len(in.Devices) == 0 {
		return nil
	}
	b, err := json.Marshal(BuildTopology(in))
	if err != nil {
		return fmt.Errorf("encoding %s: %w", gpunode.TopologyAnnotation, err)
	}
	out[gpunode.TopologyAnnotation] = string(b)
	return nil
}

// BuildTopology computes the NVLink islands of in's GPUs.
func BuildTopology(in *Input) *gpunode.Topology {
	n := len(in.Devices)
	t := &gpunode.Topology{Version: gpunode.TopologyVersion, GPUs: n, Groups: []gpunode.NVLinkGroup{}, NUMA: make([]int, n)}
	for i := range in.Devices {
		t.NUMA[i] = in.Devices[i].NUMANode
	}
	t.MIG = migLayout(in.Devices)
	t.ReservedMiB = reserved(in.Devices)
	if in.Topology == nil {
		return t
	}
	group := make([]int, n)
	for i := range group {
		group[i] = -1
	}
	for i := range n {
		if group[i] >= 0 || !hasNVLink(in, i, n) {
			continue
		}
		// Breadth-first walk of the NVLink graph from i.
		g := gpunode.NVLinkGroup{GPUs: []int{i}}
		group[i] = len(t.Groups)
		for q := 0; q < len(g.GPUs); q++ {
			for j := range n {
				if l, ok := in.Topology.Between(g.GPUs[q], j); ok && l.NVLinks > 0 && group[j] < 0 {
					group[j] = len(t.Groups)
					g.GPUs = append(g.GPUs, j)
				}
			}
		}
		slices.Sort(g.GPUs)
		g.NVLinks = -1
		for a, x := range g.GPUs {
			for _, y := range g.GPUs[a+1:] {
				l, ok := in.Topology.Between(x, y)
				links := 0
				if ok {
					links = l.NVLinks
				}
				if g.NVLinks < 0 || links < g.NVLinks {
					g.NVLinks = links
				}
			}
		}
		t.Groups = append(t.Groups, g)
	}
	return t
}

// migLayout lists, per GPU index, the compute slices of the MIG instances
// on it; nil when no GPU is in MIG mode. A GPU's index is its position in
// devs, as for the other fields.
func migLayout(devs []gpu.Device) [][]int {
	var out [][]int
	for i := range devs {
		if !devs[i].MIG.Current || len(devs[i].MIGDevices) == 0 {
			continue
		}
		for len(out) <= i {
			out = append(out, []int{})
		}
		for _, m := range devs[i].MIGDevices {
			out[i] = append(out[i], m.GPUSlices)
		}
	}
	return out
}

// reserved is the memory the driver keeps on each GPU, nil when it keeps
// none anywhere (or does not say).
func reserved(devs []gpu.Device) []int64 {
	var out []int64
	for i := range devs {
		if devs[i].ReservedMiB == 0 {
			continue
		}
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i] = int64(min(devs[i].ReservedMiB, gpunode.MaxGPUMemoryMiB))
	}
	return out
}

func hasNVLink(in *Input, i, n int) bool {
	for j := range n {
		if l, ok := in.Topology.Between(i, j); ok && l.NVLinks > 0 {
			return true
		}
	}
	return false
}
