package mig

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// GPU is what planning needs to know of one GPU.
type GPU struct {
	Index    int      `json:"index"`
	UUID     string   `json:"uuid"`
	Name     string   `json:"name"`
	DeviceID DeviceID `json:"deviceID"`
	Capable  bool     `json:"capable"`
	// Current is the layout the GPU has now.
	Current Layout `json:"current"`
	// Profiles are the GPU instance profiles it offers (MIG-capable GPUs).
	Profiles []gpu.MIGProfile `json:"-"`
}

// GPUs reads the planning view of every GPU from a backend: the inventory
// and, for MIG-capable GPUs, their profiles.
func GPUs(ctx context.Context, b interface {
	gpu.Inventory
	gpu.MIGManager
}) ([]GPU, error) {
	devs, err := b.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	out := make([]GPU, len(devs))
	for i := range devs {
		d := &devs[i]
		g := GPU{Index: d.Index, UUID: d.UUID, Name: d.Name, DeviceID: DeviceID(d.PCIDeviceID), Capable: d.MIG.Capable, Current: LayoutOf(d)}
		if d.MIG.Capable {
			if g.Profiles, err = b.MIGProfiles(ctx, d.Index); err != nil {
				return nil, fmt.Errorf("reading the MIG profiles of GPU %d: %w", d.Index, err)
			}
		}
		out[i] = g
	}
	return out, nil
}

// Change is one GPU whose layout a plan changes.
type Change struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	From  Layout `json:"from"`
	To    Layout `json:"to"`
	// Instances are the MIG devices To creates, placed.
	Instances []Instance `json:"instances,omitempty"`
	// Entry names the config entry that chose To.
	Entry string `json:"entry"`
}

// Plan is what applying a named config to a node's GPUs changes. Only the
// GPUs in Changes are touched; the others keep their devices and pods.
type Plan struct {
	Config  string   `json:"config"`
	Changes []Change `json:"changes"`
	// Unchanged are the GPUs the config leaves as they are: already in
	// their layout, or selected by no entry.
	Unchanged []int `json:"unchanged"`
	// Unselected are the GPUs no entry selects (their device-filter or
	// devices leave them out): they keep whatever layout they have.
	Unselected []int `json:"unselected,omitempty"`
	// Targets is, per GPU index, the layout the config gives it (the
	// current one for a GPU no entry selects).
	Targets map[int]Layout `json:"targets"`
}

// ErrInvalid is wrapped by NewPlan when the config cannot apply to the
// node: the error names the field and the GPU.
var ErrInvalid = errors.New("the MIG config does not fit this node")

// NewPlan computes the per-GPU changes that config name of spec makes to
// gpus. Every selected GPU's layout is validated against its own profiles
// before anything is planned, so a plan either fits every GPU it selects
// or is an error naming the entry, the field and the GPU.
//
// Selection follows mig-parted: an entry selects the GPUs whose PCI device
// ID its device-filter admits and whose index its devices list names;
// later entries override earlier ones; a GPU no entry selects keeps its
// layout. A GPU that cannot run MIG is skipped by an entry for all devices
// or one that turns MIG off, and is an error for one that names it.
func NewPlan(spec *Spec, name string, gpus []GPU) (*Plan, error) {
	cfg, err := spec.Lookup(name)
	if err != nil {
		return nil, err
	}
	chosen := make(map[int]*Entry, len(gpus))
	for ei := range cfg {
		e := &cfg[ei]
		for di, idx := range e.Devices {
			if idx >= len(gpus) {
				return nil, fmt.Errorf("%s.devices[%d]: %w: GPU %d does not exist (the node has GPUs 0 to %d)", e.Path, di, ErrInvalid, idx, len(gpus)-1)
			}
		}
		for i := range gpus {
			g := &gpus[i]
			if !e.Matches(g.DeviceID) || !e.Selects(g.Index) {
				continue
			}
			if !g.Capable {
				if e.AllDevices || !e.Layout.Enabled {
					continue
				}
				return nil, fmt.Errorf("%s.devices: %w: GPU %d (%s) cannot run MIG", e.Path, ErrInvalid, g.Index, g.Name)
			}
			chosen[i] = e
		}
	}
	p := &Plan{Config: name, Targets: make(map[int]Layout, len(gpus)), Changes: []Change{}, Unchanged: []int{}}
	for i := range gpus {
		g := &gpus[i]
		e, ok := chosen[i]
		if !ok {
			p.Targets[g.Index] = g.Current
			p.Unchanged = append(p.Unchanged, g.Index)
			p.Unselected = append(p.Unselected, g.Index)
			continue
		}
		insts, err := Fit(e.Path+".mig-devices", g.Profiles, e.Layout)
		if err != nil {
			return nil, fmt.Errorf("GPU %d (%s): %w: %w", g.Index, g.Name, ErrInvalid, err)
		}
		p.Targets[g.Index] = e.Layout
		if g.Current.Equal(e.Layout) {
			p.Unchanged = append(p.Unchanged, g.Index)
			continue
		}
		p.Changes = append(p.Changes, Change{Index: g.Index, UUID: g.UUID, Name: g.Name, From: g.Current, To: e.Layout, Instances: insts, Entry: e.Path})
	}
	return p, nil
}

// Changed reports whether the plan changes GPU index.
func (p *Plan) Changed(index int) bool {
	for _, c := range p.Changes {
		if c.Index == index {
			return true
		}
	}
	return false
}
