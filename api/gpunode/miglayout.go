package gpunode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
)

// MIGLayoutAnnotation is the Node annotation in which gpuplane-agent
// publishes its GPUs' MIG layouts and the MIG profiles each GPU model
// offers, so that `gpuplane mig plan` can show what a config would change
// without running on the node. JSON (MIGLayout), at most
// MaxMIGLayoutBytes.
const MIGLayoutAnnotation = "gpuplane.io/mig-layout"

// MaxMIGLayoutBytes bounds the annotation: eight GPUs of one model take
// about 2 KiB.
const MaxMIGLayoutBytes = 64 << 10

// MIGLayout is the value of MIGLayoutAnnotation.
type MIGLayout struct {
	// V is the format's version, 1.
	V    int            `json:"v"`
	GPUs []MIGLayoutGPU `json:"gpus"`
	// Models are the GPU instance profiles of each GPU model by PCI
	// device ID ("0x233010DE"); MIG-capable models only.
	Models map[string][]MIGLayoutProfile `json:"models,omitempty"`
}

// MIGLayoutGPU is one GPU's MIG layout.
type MIGLayoutGPU struct {
	Index    int    `json:"i"`
	DeviceID string `json:"id"`
	Name     string `json:"name"`
	// MIG is the GPU's MIG mode; Devices counts its MIG devices by
	// profile ("1g.10gb": 7).
	MIG     bool           `json:"mig"`
	Devices map[string]int `json:"devices,omitempty"`
}

// MIGLayoutProfile is one GPU instance profile of a model.
type MIGLayoutProfile struct {
	Name      string `json:"n"`
	ID        int    `json:"pid"`
	Slices    int    `json:"s"`
	Instances int    `json:"c"`
	MemoryMiB uint64 `json:"m"`
	// Placements are [start, size] in memory slices.
	Placements [][2]int `json:"p"`
}

var deviceIDRE = regexp.MustCompile(`^0x[0-9A-F]{8}$`)

// ParseMIGLayout reads MIGLayoutAnnotation's value strictly and within
// bounds; the error names the field.
func ParseMIGLayout(s string) (*MIGLayout, error) {
	if len(s) > MaxMIGLayoutBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", MIGLayoutAnnotation, MaxMIGLayoutBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var l MIGLayout
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: %w", MIGLayoutAnnotation, err)
	}
	if l.V != 1 {
		return nil, fmt.Errorf("%s: v: want 1, got %d", MIGLayoutAnnotation, l.V)
	}
	if len(l.GPUs) > MaxGPUs {
		return nil, fmt.Errorf("%s: gpus: %d, at most %d", MIGLayoutAnnotation, len(l.GPUs), MaxGPUs)
	}
	for i, g := range l.GPUs {
		if g.Index != i {
			return nil, fmt.Errorf("%s: gpus[%d].i: %d, want the GPUs in index order from 0", MIGLayoutAnnotation, i, g.Index)
		}
		if !deviceIDRE.MatchString(g.DeviceID) {
			return nil, fmt.Errorf("%s: gpus[%d].id: %q is not a PCI device ID such as 0x233010DE", MIGLayoutAnnotation, i, g.DeviceID)
		}
		if len(g.Devices) > MaxGPUs {
			return nil, fmt.Errorf("%s: gpus[%d].devices: %d profiles, at most %d", MIGLayoutAnnotation, i, len(g.Devices), MaxGPUs)
		}
		for p, n := range g.Devices {
			if n < 1 || n > MaxMIGSlices || len(p) > 32 {
				return nil, fmt.Errorf("%s: gpus[%d].devices[%q]: %d, want 1 to %d", MIGLayoutAnnotation, i, p, n, MaxMIGSlices)
			}
		}
	}
	if len(l.Models) > MaxGPUs {
		return nil, fmt.Errorf("%s: models: %d, at most %d", MIGLayoutAnnotation, len(l.Models), MaxGPUs)
	}
	ids := make([]string, 0, len(l.Models))
	for id := range l.Models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ps := l.Models[id]
		if !deviceIDRE.MatchString(id) || len(ps) > 32 {
			return nil, fmt.Errorf("%s: models[%q]: want a PCI device ID with at most 32 profiles", MIGLayoutAnnotation, id)
		}
		for j, p := range ps {
			if p.Name == "" || len(p.Name) > 32 || p.Slices < 1 || p.Slices > MaxMIGSlices || p.Instances < 1 || p.Instances > MaxMIGSlices || len(p.Placements) > 16 {
				return nil, fmt.Errorf("%s: models[%q][%d]: a profile needs a name, 1 to %d slices and instances, at most 16 placements", MIGLayoutAnnotation, id, j, MaxMIGSlices)
			}
			for _, pl := range p.Placements {
				if pl[0] < 0 || pl[1] < 1 || pl[0]+pl[1] > 16 {
					return nil, fmt.Errorf("%s: models[%q][%d].p: placement %v is outside 16 memory slices", MIGLayoutAnnotation, id, j, pl)
				}
			}
		}
	}
	return &l, nil
}
