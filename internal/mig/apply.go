package mig

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Hardware is the part of the GPU seam applying needs: the inventory (to
// read the MIG devices there are) and the MIG calls.
type Hardware interface {
	gpu.Inventory
	gpu.MIGManager
}

// ErrModePending is wrapped when a GPU's MIG mode change waits for a GPU
// reset (processes still run on it, or the driver needs one).
var ErrModePending = errors.New("the MIG mode change is pending a GPU reset")

// RolledBackError says that the hardware refused a layout and the GPU was
// put back in its previous one. Err is why the layout was refused.
type RolledBackError struct {
	Index int
	To    Layout
	Back  Layout
	Err   error
}

func (e *RolledBackError) Error() string {
	return fmt.Sprintf("GPU %d: the driver refused %s (%v); rolled back to %s", e.Index, e.To, e.Err, e.Back)
}

func (e *RolledBackError) Unwrap() error { return e.Err }

// ApplyGPU puts GPU index in layout to, placing its devices as insts says
// (from Fit). It destroys the GPU's MIG devices first, so the GPU must
// serve no pod. When creating the new devices fails, it destroys what it
// created and restores the GPU's previous devices at their previous
// placements, and returns a *RolledBackError; when even that fails, the
// error says so and the GPU is left with no MIG devices.
func ApplyGPU(ctx context.Context, hw Hardware, index int, to Layout, insts []Instance) error {
	dev, err := device(ctx, hw, index)
	if err != nil {
		return err
	}
	prev := LayoutOf(&dev)
	prevInsts := instancesOf(&dev)
	if err := clearGPU(ctx, hw, &dev); err != nil {
		return err
	}
	err = build(ctx, hw, index, to, insts)
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrModePending) || ctx.Err() != nil {
		return err
	}
	// The hardware refused the layout: back to the last good one.
	if dev2, derr := device(ctx, hw, index); derr == nil {
		if cerr := clearGPU(ctx, hw, &dev2); cerr != nil {
			return fmt.Errorf("GPU %d: applying %s: %w; clearing it to roll back also failed: %w", index, to, err, cerr)
		}
	}
	if berr := build(ctx, hw, index, prev, prevInsts); berr != nil {
		return fmt.Errorf("GPU %d: applying %s: %w; rolling back to %s also failed: %w", index, to, err, prev, berr)
	}
	return &RolledBackError{Index: index, To: to, Back: prev, Err: err}
}

func device(ctx context.Context, hw Hardware, index int) (gpu.Device, error) {
	devs, err := hw.Devices(ctx)
	if err != nil {
		return gpu.Device{}, fmt.Errorf("listing GPUs: %w", err)
	}
	for _, d := range devs {
		if d.Index == index {
			return d, nil
		}
	}
	return gpu.Device{}, fmt.Errorf("GPU %d: %w", index, gpu.ErrNotFound)
}

// instancesOf records a GPU's MIG devices where they sit, to restore them.
func instancesOf(d *gpu.Device) []Instance {
	out := make([]Instance, 0, len(d.MIGDevices))
	for _, m := range d.MIGDevices {
		c, gi := splitProfile(m.Profile)
		inst := Instance{Profile: m.Profile, GPUInstanceProfile: gi, Placement: m.Placement, MemoryMiB: m.MemoryMiB, Slices: m.GPUSlices}
		if c > 0 {
			inst.ComputeProfile = m.Profile
		}
		out = append(out, inst)
	}
	return out
}

// clearGPU destroys every compute and GPU instance of a GPU in MIG mode.
func clearGPU(ctx context.Context, hw Hardware, d *gpu.Device) error {
	if !d.MIG.Current {
		return nil
	}
	for _, m := range d.MIGDevices {
		if err := hw.DestroyComputeInstance(ctx, d.Index, m.GPUInstanceID, m.ComputeInstanceID); err != nil && !errors.Is(err, gpu.ErrNotFound) {
			return fmt.Errorf("GPU %d: destroying MIG device %s: %w", d.Index, m.UUID, err)
		}
	}
	gis, err := hw.GPUInstances(ctx, d.Index)
	if err != nil {
		return fmt.Errorf("GPU %d: listing GPU instances: %w", d.Index, err)
	}
	for _, gi := range gis {
		if err := hw.DestroyGPUInstance(ctx, d.Index, gi.ID); err != nil && !errors.Is(err, gpu.ErrNotFound) {
			return fmt.Errorf("GPU %d: destroying GPU instance %d (%s): %w", d.Index, gi.ID, gi.Profile, err)
		}
	}
	return nil
}

// build sets the MIG mode and creates insts on a GPU with no MIG devices.
func build(ctx context.Context, hw Hardware, index int, to Layout, insts []Instance) error {
	if err := hw.SetMIGMode(ctx, index, to.Enabled); err != nil {
		return fmt.Errorf("GPU %d: setting MIG mode to %v: %w", index, to.Enabled, err)
	}
	d, err := device(ctx, hw, index)
	if err != nil {
		return err
	}
	if d.MIG.Current != to.Enabled {
		return fmt.Errorf("GPU %d: MIG mode is %v, %v once the GPU is reset: %w", index, d.MIG.Current, d.MIG.Pending, ErrModePending)
	}
	if !to.Enabled {
		return nil
	}
	var made []gpu.GPUInstance
	undo := func() {
		for _, gi := range made {
			if cis, err := device(ctx, hw, index); err == nil {
				for _, m := range cis.MIGDevices {
					if m.GPUInstanceID == gi.ID {
						_ = hw.DestroyComputeInstance(ctx, index, gi.ID, m.ComputeInstanceID)
					}
				}
			}
			_ = hw.DestroyGPUInstance(ctx, index, gi.ID)
		}
	}
	for _, in := range insts {
		pl := in.Placement
		gi, err := hw.CreateGPUInstance(ctx, index, in.GPUInstanceProfile, &pl)
		if err != nil {
			undo()
			return fmt.Errorf("GPU %d: creating GPU instance %s at %d:%d: %w", index, in.GPUInstanceProfile, pl.Start, pl.Size, err)
		}
		made = append(made, gi)
		if _, err := hw.CreateComputeInstance(ctx, index, gi.ID, in.ComputeProfile); err != nil {
			undo()
			return fmt.Errorf("GPU %d: creating compute instance %s in GPU instance %d: %w", index, in.Profile, gi.ID, err)
		}
	}
	return nil
}

// ApplyPlan applies every change of a plan in GPU order, stopping at the
// first GPU that fails (GPUs before it keep their new layout, the failing
// one its previous one when it rolled back). It is for a node with no pods
// on the changing GPUs: the agent evicts them first.
func ApplyPlan(ctx context.Context, hw Hardware, p *Plan) error {
	for _, c := range p.Changes {
		if err := ApplyGPU(ctx, hw, c.Index, c.To, c.Instances); err != nil {
			return err
		}
	}
	return nil
}
