package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// A state file keeps the simulated GPUs' MIG mode and instances across
// restarts of the process that simulates them, as real GPUs keep theirs
// across restarts of the agent (Options.StateFile). It is JSON:
//
//	{"version": 1, "gpus": [
//	  {"index": 3, "current": true, "pending": true,
//	   "instances": [{"profile": "3g.40gb", "start": 0, "computes": ["3g.40gb"]}]}]}
//
// Every GPU the file lists is set to it at start; the others keep the
// profile's layout.

// stateVersion is the only version of the state file.
const stateVersion = 1

// maxStateBytes bounds the state file: a full DGX with seven instances per
// GPU takes about 4 KiB.
const maxStateBytes = 256 << 10

type stateFile struct {
	Version int        `json:"version"`
	GPUs    []stateGPU `json:"gpus"`
}

type stateGPU struct {
	Index     int             `json:"index"`
	Current   bool            `json:"current"`
	Pending   bool            `json:"pending"`
	Instances []stateInstance `json:"instances,omitempty"`
}

type stateInstance struct {
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	Size    int    `json:"size"`
	// Computes are the compute instances' device names, in creation
	// order.
	Computes []string `json:"computes,omitempty"`
}

// ParseState reads a state file strictly: unknown fields, another version
// or more than maxStateBytes are errors naming the field.
func ParseState(data []byte) (*stateFile, error) {
	if len(data) > maxStateBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s stateFile
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("not a state file: %w", err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("version: want %d, got %d", stateVersion, s.Version)
	}
	seen := map[int]bool{}
	for i, g := range s.GPUs {
		if g.Index < 0 || g.Index >= 64 || seen[g.Index] {
			return nil, fmt.Errorf("gpus[%d].index: %d is out of range or listed twice", i, g.Index)
		}
		seen[g.Index] = true
		if len(g.Instances) > 64 {
			return nil, fmt.Errorf("gpus[%d].instances: %d, at most 64", i, len(g.Instances))
		}
		for j, in := range g.Instances {
			if len(in.Computes) > 64 {
				return nil, fmt.Errorf("gpus[%d].instances[%d].computes: %d, at most 64", i, j, len(in.Computes))
			}
		}
	}
	return &s, nil
}

// restoreState sets the GPUs a state file lists to what it says. It runs
// in New, before the backend is shared.
func (b *Backend) restoreState(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the state file: %w", err)
	}
	s, err := ParseState(data)
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	ctx := context.Background()
	for i, sg := range s.GPUs {
		fail := func(err error) error {
			return fmt.Errorf("state file %s: gpus[%d] (GPU %d): %w", path, i, sg.Index, err)
		}
		if sg.Index >= len(b.gpus) {
			return fail(fmt.Errorf("the profile has %d GPUs", len(b.gpus)))
		}
		g := b.gpus[sg.Index]
		if !g.mig.capable {
			if sg.Current || sg.Pending || len(sg.Instances) > 0 {
				return fail(errors.New("the GPU cannot run MIG"))
			}
			continue
		}
		g.mig.gis = nil
		g.mig.current, g.mig.pending = sg.Current, sg.Pending
		for j, in := range sg.Instances {
			pl := gpu.Placement{Start: in.Start, Size: in.Size}
			gi, err := b.CreateGPUInstance(ctx, sg.Index, in.Profile, &pl)
			if err != nil {
				return fail(fmt.Errorf("instances[%d]: %w", j, err))
			}
			for _, c := range in.Computes {
				profile := c
				if c == in.Profile {
					profile = ""
				}
				if _, err := b.CreateComputeInstance(ctx, sg.Index, gi.ID, profile); err != nil {
					return fail(fmt.Errorf("instances[%d].computes: %w", j, err))
				}
			}
		}
	}
	return nil
}

// saveState writes every MIG-capable GPU's state to the state file, when
// there is one. It must be called with b.mu held.
func (b *Backend) saveState() {
	if b.opts.StateFile == "" {
		return
	}
	s := stateFile{Version: stateVersion, GPUs: []stateGPU{}}
	for _, g := range b.gpus {
		if !g.mig.capable {
			continue
		}
		sg := stateGPU{Index: g.index, Current: g.mig.current, Pending: g.mig.pending}
		for _, gi := range g.mig.gis {
			in := stateInstance{Profile: gi.prof.Name, Start: gi.placement.Start, Size: gi.placement.Size}
			for _, ci := range gi.cis {
				in.Computes = append(in.Computes, ci.name)
			}
			sg.Instances = append(sg.Instances, in)
		}
		s.GPUs = append(s.GPUs, sg)
	}
	data, err := json.Marshal(s)
	if err == nil {
		tmp := b.opts.StateFile + ".tmp"
		if err = os.WriteFile(tmp, data, 0o600); err == nil {
			err = os.Rename(tmp, b.opts.StateFile)
		}
	}
	if err != nil {
		b.log.Warn("the simulated GPUs' state file could not be written; a restart forgets the MIG layout", "file", filepath.Clean(b.opts.StateFile), "err", err)
	}
}
