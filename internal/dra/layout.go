package dra

import (
	"context"
	"fmt"
	"slices"
)

// This file is the driver's side of MIG layout changes made by the agent's
// MIG reconciler (internal/mig): it says which claims and which MIG
// instances it holds on a GPU, stops preparing claims on a GPU being
// re-partitioned, and publishes the GPU's new devices afterwards.

// ClaimRef names a prepared claim.
type ClaimRef struct {
	UID, Namespace, Name string
}

// PreparedClaim returns the namespace and name of the claim of uid when the
// driver has prepared it (or is preparing it).
func (d *Driver) PreparedClaim(uid string) (ClaimRef, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pc, ok := d.state.Claims[uid]
	if !ok {
		return ClaimRef{}, false
	}
	return ClaimRef{UID: uid, Namespace: pc.Namespace, Name: pc.Name}, true
}

// CreatedInstances maps the GPU instance IDs of the MIG instances the
// driver created for claims on GPU index (dynamic MIG) to the claim's UID.
// They belong to their claims, not to the GPU's layout: no one but the
// driver (at unprepare) may destroy them.
func (d *Driver) CreatedInstances(index int) map[int]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[int]string{}
	for uid, pc := range d.state.Claims {
		for _, dv := range pc.Devices {
			if m := dv.MIG; m != nil && m.Created && m.GPUIndex == index {
				out[m.GPUInstanceID] = uid
			}
		}
	}
	return out
}

// Withdraw marks the devices of the given GPUs with the taint
// gpu.gpuplane.io/mig-changing and refuses to prepare claims on them, and
// lifts both from every other GPU; the ResourceSlices follow at once.
func (d *Driver) Withdraw(gpus []int) {
	next := make(map[int]bool, len(gpus))
	for _, i := range gpus {
		next[i] = true
	}
	d.mu.Lock()
	same := len(next) == len(d.withdrawn)
	for i := range next {
		same = same && d.withdrawn[i]
	}
	d.withdrawn = next
	d.mu.Unlock()
	if !same {
		d.signalRepublish()
	}
}

// Withdrawn lists the GPUs Withdraw took out, sorted.
func (d *Driver) Withdrawn() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]int, 0, len(d.withdrawn))
	for i := range d.withdrawn {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// Refresh reads the GPUs again, so that the pool describes the MIG
// layout they have now (devices of a GPU that left or entered MIG mode, or
// whose static instances changed), and has the ResourceSlices republished.
// MIG instances the driver made for claims stay theirs, and whole GPUs
// stay published for consumable capacity (Options.SharedGPUs).
func (d *Driver) Refresh(ctx context.Context) error {
	d.mu.Lock()
	inv, err := buildInventory(ctx, d.o.Backend, d.o.PCIeRoot, d.created)
	if err == nil {
		if d.o.SharedGPUs {
			inv.shareGPUs()
		}
		d.inv = inv
	}
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("reading the GPUs to republish the DRA driver's devices: %w", err)
	}
	d.signalRepublish()
	return nil
}

func (d *Driver) signalRepublish() {
	select {
	case d.republish <- struct{}{}:
	default:
	}
}
