package gpunode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"
)

// MIG layouts that follow demand. A node pool opts in with
// LabelMIGLayoutPolicy; gpuplane-scheduler then proposes layouts for its
// idle GPUs in MIGProposalAnnotation and gpuplane-agent applies them.
const (
	// LabelMIGLayoutPolicy on a Node lets gpuplane-scheduler change the
	// MIG layout of the node's idle GPUs to follow pending demand when its
	// value is MIGLayoutFollowDemand. A node without it (or with any other
	// value) is never proposed for.
	LabelMIGLayoutPolicy = "gpuplane.io/mig-layout-policy"
	// MIGLayoutFollowDemand is the value of LabelMIGLayoutPolicy that opts
	// a node in.
	MIGLayoutFollowDemand = "follow-demand"

	// MIGProposalAnnotation is the Node annotation in which
	// gpuplane-scheduler writes the MIG layouts it proposes for the node's
	// GPUs: JSON (MIGProposal), at most MaxMIGProposalBytes. On a node
	// that opts in, gpuplane-agent takes each entry as the desired layout
	// of its GPU, over what the nvidia.com/mig.config label chooses, and
	// applies it only while the GPU holds no pod.
	MIGProposalAnnotation = "gpuplane.io/mig-proposal"
	// MaxMIGProposalBytes bounds the annotation: eight GPUs take about
	// 600 bytes.
	MaxMIGProposalBytes = 16 << 10
	// ReasonMIGProposalWaiting (a reason of ConditionMIGConfig): a
	// proposed layout waits because its GPU still holds pods, which the
	// agent never evicts for a proposal.
	ReasonMIGProposalWaiting = "ProposalWaitingForIdleGPU"
)

// MIGProposal is the value of MIGProposalAnnotation: at most one entry
// per GPU, in index order, each the layout last proposed for that GPU.
type MIGProposal struct {
	// V is the format's version, 1.
	V    int              `json:"v"`
	GPUs []MIGProposalGPU `json:"gpus"`
}

// MIGProposalGPU is one GPU's proposed layout: MIG mode and its MIG
// devices by profile ("1g.10gb": 7), the same terms in which the agent
// reports a layout (MIGLayoutGPU). MIG false with no devices turns MIG
// off: the GPU is offered whole.
type MIGProposalGPU struct {
	Index   int            `json:"i"`
	MIG     bool           `json:"mig"`
	Devices map[string]int `json:"devices,omitempty"`
	// At is when it was proposed, in Unix milliseconds: the scheduler's
	// hysteresis counts from it.
	At int64 `json:"at"`
}

// ReportedBy reports whether the node's published layout of the GPU is
// this proposal: the agent has applied it.
func (p *MIGProposalGPU) ReportedBy(g *MIGLayoutGPU) bool {
	if g.Index != p.Index || g.MIG != p.MIG {
		return false
	}
	drop := func(m map[string]int) map[string]int {
		out := make(map[string]int, len(m))
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	return maps.Equal(drop(g.Devices), drop(p.Devices))
}

// String renders the layout as "mig: 7x1g.10gb" or "whole GPU".
func (p *MIGProposalGPU) String() string {
	if !p.MIG {
		return "whole GPU"
	}
	names := make([]string, 0, len(p.Devices))
	for n := range p.Devices {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%dx%s", p.Devices[n], n)
	}
	if len(parts) == 0 {
		return "mig: none"
	}
	return "mig: " + strings.Join(parts, ", ")
}

// migProfileRE is a MIG device profile as the agent names them
// ("1g.10gb", "1g.10gb+me", "1c.3g.40gb").
var migProfileRE = regexp.MustCompile(`^([1-7]c\.)?[1-7]g\.[0-9]+gb(\+[a-z]+)?$`)

// ParseMIGProposal reads MIGProposalAnnotation's value strictly and within
// bounds; the error names the field.
func ParseMIGProposal(s string) (*MIGProposal, error) {
	if len(s) > MaxMIGProposalBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", MIGProposalAnnotation, MaxMIGProposalBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var p MIGProposal
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %w", MIGProposalAnnotation, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", MIGProposalAnnotation)
	}
	if p.V != 1 {
		return nil, fmt.Errorf("%s: v: want 1, got %d", MIGProposalAnnotation, p.V)
	}
	if len(p.GPUs) > MaxGPUs {
		return nil, fmt.Errorf("%s: gpus: %d entries, at most %d", MIGProposalAnnotation, len(p.GPUs), MaxGPUs)
	}
	for i := range p.GPUs {
		g := &p.GPUs[i]
		switch {
		case g.Index < 0 || g.Index >= MaxGPUs:
			return nil, fmt.Errorf("%s: gpus[%d].i: %d, want 0 to %d", MIGProposalAnnotation, i, g.Index, MaxGPUs-1)
		case i > 0 && g.Index <= p.GPUs[i-1].Index:
			return nil, fmt.Errorf("%s: gpus[%d].i: %d, want one entry per GPU in index order", MIGProposalAnnotation, i, g.Index)
		case g.At < 0:
			return nil, fmt.Errorf("%s: gpus[%d].at: %d, want Unix milliseconds", MIGProposalAnnotation, i, g.At)
		case !g.MIG && len(g.Devices) > 0:
			return nil, fmt.Errorf("%s: gpus[%d].devices: a GPU with MIG off has no MIG devices", MIGProposalAnnotation, i)
		case len(g.Devices) > MaxMIGSlices:
			return nil, fmt.Errorf("%s: gpus[%d].devices: %d profiles, at most %d", MIGProposalAnnotation, i, len(g.Devices), MaxMIGSlices)
		}
		total := 0
		for _, name := range sortedKeys(g.Devices) {
			n := g.Devices[name]
			if !migProfileRE.MatchString(name) {
				return nil, fmt.Errorf("%s: gpus[%d].devices[%q]: not a MIG profile such as 1g.10gb", MIGProposalAnnotation, i, truncate(name))
			}
			if n < 1 || n > MaxMIGSlices {
				return nil, fmt.Errorf("%s: gpus[%d].devices[%q]: %d, want 1 to %d", MIGProposalAnnotation, i, name, n, MaxMIGSlices)
			}
			if total += n; total > MaxMIGSlices {
				return nil, fmt.Errorf("%s: gpus[%d].devices: more than %d MIG devices on one GPU", MIGProposalAnnotation, i, MaxMIGSlices)
			}
		}
	}
	return &p, nil
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
