package gpupod

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPU choice bounds: what GPUsAnnotation may name.
const (
	// MilliPerGPU is a whole GPU in thousandths.
	MilliPerGPU = 1000
	// MaxMIGSlices is the most compute slices a MIG instance has.
	MaxMIGSlices = 7
	// MaxGPUsChosen bounds how many GPUs one pod's choice names (no node
	// has more).
	MaxGPUsChosen = 64
)

// GPUChoice is one GPU of a pod's placement on its node, as
// gpuplane-scheduler chose it and the node honours it: the GPU by index,
// and for part of a GPU how much: Milli thousandths of its compute (a
// time-sliced or MPS share), or a MIG instance of MIGSlices compute
// slices. A whole GPU has neither.
type GPUChoice struct {
	Index     int
	Milli     int64
	MIGSlices int
}

// Whole reports whether c is a whole GPU.
func (c GPUChoice) Whole() bool {
	return c.MIGSlices == 0 && (c.Milli == 0 || c.Milli >= MilliPerGPU)
}

// ComputeMilli is the thousandths of its GPU's compute c takes: all of
// them for a whole GPU, Milli for a share, none for a MIG instance (whose
// part of the GPU is counted in slices).
func (c GPUChoice) ComputeMilli() int64 {
	switch {
	case c.MIGSlices > 0:
		return 0
	case c.Whole():
		return MilliPerGPU
	}
	return c.Milli
}

// FormatGPUs renders a choice as GPUsAnnotation holds it: "0,1" for whole
// GPUs, "3:250" for a quarter of GPU 3, "2:m3" for a 3-slice MIG instance
// on GPU 2.
func FormatGPUs(choice []GPUChoice) string {
	parts := make([]string, len(choice))
	for i, c := range choice {
		switch {
		case c.MIGSlices > 0:
			parts[i] = fmt.Sprintf("%d:m%d", c.Index, c.MIGSlices)
		case !c.Whole():
			parts[i] = fmt.Sprintf("%d:%d", c.Index, c.Milli)
		default:
			parts[i] = strconv.Itoa(c.Index)
		}
	}
	return strings.Join(parts, ",")
}

// ParseGPUs reads GPUsAnnotation's value for a node of gpus GPUs. It
// refuses, naming what is wrong, an index the node does not have, a GPU
// named twice, a share outside 1 to 999 thousandths and a MIG instance
// outside 1 to 7 slices; a whole GPU comes back with Milli and MIGSlices
// 0. Callers check amounts against the particular GPU.
func ParseGPUs(s string, gpus int) ([]GPUChoice, error) {
	if s == "" {
		return nil, nil
	}
	if n := strings.Count(s, ",") + 1; n > min(gpus, MaxGPUsChosen) {
		return nil, fmt.Errorf("%s %q: %d GPUs named, the node has %d", GPUsAnnotation, truncate(s), n, gpus)
	}
	out := make([]GPUChoice, 0, strings.Count(s, ",")+1)
	for part := range strings.SplitSeq(s, ",") {
		idx, amount, hasAmount := strings.Cut(part, ":")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 || i >= gpus {
			return nil, fmt.Errorf("%s %q: GPU index %q is not one of the node's %d GPUs", GPUsAnnotation, truncate(s), truncate(idx), gpus)
		}
		if slices.ContainsFunc(out, func(c GPUChoice) bool { return c.Index == i }) {
			return nil, fmt.Errorf("%s %q: GPU %d is named twice", GPUsAnnotation, truncate(s), i)
		}
		c := GPUChoice{Index: i}
		if hasAmount {
			if m, ok := strings.CutPrefix(amount, "m"); ok {
				n, err := strconv.Atoi(m)
				if err != nil || n < 1 || n > MaxMIGSlices {
					return nil, fmt.Errorf("%s %q: MIG slices %q must be 1 to %d", GPUsAnnotation, truncate(s), truncate(m), MaxMIGSlices)
				}
				c.MIGSlices = n
			} else {
				n, err := strconv.ParseInt(amount, 10, 64)
				if err != nil || n < 1 || n >= MilliPerGPU {
					return nil, fmt.Errorf("%s %q: share %q of GPU %d must be 1 to %d thousandths (a whole GPU has no share)", GPUsAnnotation, truncate(s), truncate(amount), i, MilliPerGPU-1)
				}
				c.Milli = n
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// truncate keeps an error message short whatever the input's size.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
