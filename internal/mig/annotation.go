package mig

import (
	"fmt"
	"sort"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// LayoutAnnotation renders GPUs as the gpuplane.io/mig-layout annotation's
// value: each GPU's layout, and each MIG-capable model's profiles once.
func LayoutAnnotation(gpus []GPU) gpunode.MIGLayout {
	l := gpunode.MIGLayout{V: 1, GPUs: make([]gpunode.MIGLayoutGPU, 0, len(gpus))}
	for _, g := range gpus {
		lg := gpunode.MIGLayoutGPU{Index: g.Index, DeviceID: g.DeviceID.String(), Name: g.Name, MIG: g.Current.Enabled}
		if g.Current.Count() > 0 {
			lg.Devices = map[string]int{}
			for p, n := range g.Current.Devices {
				if n > 0 {
					lg.Devices[p] = n
				}
			}
		}
		l.GPUs = append(l.GPUs, lg)
		if !g.Capable || len(g.Profiles) == 0 {
			continue
		}
		if l.Models == nil {
			l.Models = map[string][]gpunode.MIGLayoutProfile{}
		}
		if _, ok := l.Models[lg.DeviceID]; ok {
			continue
		}
		ps := make([]gpunode.MIGLayoutProfile, 0, len(g.Profiles))
		for _, p := range g.Profiles {
			lp := gpunode.MIGLayoutProfile{Name: p.Name, ID: p.ID, Slices: p.SliceCount, Instances: p.InstanceCount, MemoryMiB: p.MemoryMiB}
			for _, pl := range p.Placements {
				lp.Placements = append(lp.Placements, [2]int{pl.Start, pl.Size})
			}
			ps = append(ps, lp)
		}
		l.Models[lg.DeviceID] = ps
	}
	return l
}

// GPUsFromLayout reads a node's published layout back into the planning
// view: what `gpuplane mig plan` plans against off the node.
func GPUsFromLayout(l *gpunode.MIGLayout) ([]GPU, error) {
	out := make([]GPU, 0, len(l.GPUs))
	for _, lg := range l.GPUs {
		id, err := ParseDeviceID(lg.DeviceID)
		if err != nil {
			return nil, fmt.Errorf("%s: gpus[%d].id: %w", gpunode.MIGLayoutAnnotation, lg.Index, err)
		}
		g := GPU{Index: lg.Index, Name: lg.Name, DeviceID: id, Current: Layout{Enabled: lg.MIG}}
		if lg.MIG {
			g.Current.Devices = map[string]int{}
			for p, n := range lg.Devices {
				g.Current.Devices[p] = n
			}
		}
		if ps, ok := l.Models[lg.DeviceID]; ok {
			g.Capable = true
			for _, lp := range ps {
				p := gpu.MIGProfile{Name: lp.Name, ID: lp.ID, SliceCount: lp.Slices, InstanceCount: lp.Instances, MemoryMiB: lp.MemoryMiB}
				for _, pl := range lp.Placements {
					p.Placements = append(p.Placements, gpu.Placement{Start: pl[0], Size: pl[1]})
				}
				g.Profiles = append(g.Profiles, p)
			}
			sort.SliceStable(g.Profiles, func(i, j int) bool { return g.Profiles[i].ID < g.Profiles[j].ID })
		}
		out = append(out, g)
	}
	return out, nil
}
