package gpunode

import (
	"encoding/json"
	"fmt"
	"slices"
)

// TopologyVersion is the version of the topology annotation's format.
const TopologyVersion = 1

// Topology is the value of TopologyAnnotation.
type Topology struct {
	Version int           `json:"v"`
	GPUs    int           `json:"gpus"`
	Groups  []NVLinkGroup `json:"groups"`
	NUMA    []int         `json:"numa"`
	// MIG lists, per GPU index, the compute slices of each MIG instance
	// laid out on it; a GPU not in MIG mode has none (and the list may
	// stop before the last GPUs).
	MIG [][]int `json:"mig,omitempty"`
	// ReservedMiB lists, per GPU index, the memory the driver keeps for
	// itself (MiB): a GPU gives pods its nvidia.com/gpu.memory less this.
	// The list may stop before the last GPUs (none reserved there).
	ReservedMiB []int64 `json:"reservedMiB,omitempty"`
}

// MaxMIGSlices is the most compute slices one GPU is split into.
const MaxMIGSlices = 7

// NVLinkGroup is a set of GPUs connected to each other by NVLink.
type NVLinkGroup struct {
	GPUs []int `json:"gpus"`
	// NVLinks is the smallest NVLink count between two members.
	NVLinks int `json:"nvlinks"`
}

// ParseTopology reads a TopologyAnnotation value and checks it against the
// format and the bounds of this package: every GPU index in range and in
// at most one group, group members ascending, NVLink counts and NUMA nodes
// in range, one NUMA entry per GPU at most.
func ParseTopology(s string) (*Topology, error) {
	if len(s) > MaxAnnotationBytes {
		return nil, fmt.Errorf("%s: %d bytes is more than the %d a topology can need", TopologyAnnotation, len(s), MaxAnnotationBytes)
	}
	var t Topology
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return nil, fmt.Errorf("%s: not the topology JSON ({\"v\":1,\"gpus\":N,...}): %w", TopologyAnnotation, err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate checks t against the format and bounds ParseTopology enforces.
func (t *Topology) Validate() error {
	if t.Version != TopologyVersion {
		return fmt.Errorf("%s: v: format version %d is not supported (want %d)", TopologyAnnotation, t.Version, TopologyVersion)
	}
	if t.GPUs < 0 || t.GPUs > MaxGPUs {
		return fmt.Errorf("%s: gpus: must be 0 to %d, got %d", TopologyAnnotation, MaxGPUs, t.GPUs)
	}
	if len(t.NUMA) > t.GPUs {
		return fmt.Errorf("%s: numa: %d entries for %d GPUs", TopologyAnnotation, len(t.NUMA), t.GPUs)
	}
	for i, n := range t.NUMA {
		if n < -1 || n > MaxNUMANode {
			return fmt.Errorf("%s: numa[%d]: must be -1 to %d, got %d", TopologyAnnotation, i, MaxNUMANode, n)
		}
	}
	if len(t.MIG) > t.GPUs {
		return fmt.Errorf("%s: mig: %d entries for %d GPUs", TopologyAnnotation, len(t.MIG), t.GPUs)
	}
	for i, inst := range t.MIG {
		sum := 0
		for _, n := range inst {
			if n < 1 || n > MaxMIGSlices {
				return fmt.Errorf("%s: mig[%d]: an instance has 1 to %d slices, got %d", TopologyAnnotation, i, MaxMIGSlices, n)
			}
			sum += n
			if sum > MaxMIGSlices {
				return fmt.Errorf("%s: mig[%d]: instances of more than %d slices in all", TopologyAnnotation, i, MaxMIGSlices)
			}
		}
	}
	if len(t.ReservedMiB) > t.GPUs {
		return fmt.Errorf("%s: reservedMiB: %d entries for %d GPUs", TopologyAnnotation, len(t.ReservedMiB), t.GPUs)
	}
	for i, r := range t.ReservedMiB {
		if r < 0 || r > MaxGPUMemoryMiB {
			return fmt.Errorf("%s: reservedMiB[%d]: must be 0 to %d, got %d", TopologyAnnotation, i, MaxGPUMemoryMiB, r)
		}
	}
	seen := make([]bool, t.GPUs)
	for k, g := range t.Groups {
		if g.NVLinks < 0 || g.NVLinks > MaxNVLinks {
			return fmt.Errorf("%s: groups[%d].nvlinks: must be 0 to %d, got %d", TopologyAnnotation, k, MaxNVLinks, g.NVLinks)
		}
		if !slices.IsSorted(g.GPUs) {
			return fmt.Errorf("%s: groups[%d].gpus: must be in ascending order", TopologyAnnotation, k)
		}
		for _, i := range g.GPUs {
			if i < 0 || i >= t.GPUs || seen[i] {
				return fmt.Errorf("%s: groups[%d].gpus: GPU %d is out of range 0..%d or in two groups", TopologyAnnotation, k, i, t.GPUs-1)
			}
			seen[i] = true
		}
	}
	return nil
}
