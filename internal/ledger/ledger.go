package ledger

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// ErrHeld is wrapped by the errors of a hold refused because another holder
// has the device.
var ErrHeld = errors.New("device is held")

// allocateGrace is how long a device the plugin handed out in Allocate
// counts as the plugin's before PodResources lists it: the kubelet records
// the allocation right after Allocate returns.
const allocateGrace = 30 * time.Second

// Ledger records the holders of a node's devices. The zero value is not
// usable; call New.
type Ledger struct {
	now func() time.Time

	mu sync.Mutex
	// claims maps a device UUID to the UID of the claim holding it.
	claims map[string]string
	// onGPU maps a held MIG device's UUID to its GPU's UUID: a GPU with a
	// claimed MIG device is not the plugin's to give whole.
	onGPU map[string]string
	// shares maps a GPU's UUID to the claims holding part of it (bytes of
	// its memory): several claims may hold one GPU by shares as long as
	// their shares fit.
	shares map[string]map[string]int64
	// plugin is the set of devices PodResources lists as held by pods.
	plugin map[string]bool
	// allocated maps devices the plugin handed out to when; forgotten
	// after allocateGrace or once PodResources lists them.
	allocated map[string]time.Time
	subs      map[chan struct{}]struct{}
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{now: time.Now, claims: map[string]string{}, onGPU: map[string]string{}, shares: map[string]map[string]int64{}, plugin: map[string]bool{}, allocated: map[string]time.Time{}, subs: map[chan struct{}]struct{}{}}
}

// Hold is one device a claim holds: a GPU (GPU empty) or a MIG device of
// the GPU named by GPU; or, with Share set, Share bytes of the Of bytes
// of memory of the GPU Device (consumable capacity).
type Hold struct {
	Device string
	GPU    string
	Share  int64
	Of     int64
}

// HoldForClaim records that claim holds every device in uuids (whole GPUs
// or MIG devices whose GPU is not known), or none of them when one is held
// by the plugin or by another claim. Holding a device the same claim holds
// already is not an error (prepare is idempotent).
func (l *Ledger) HoldForClaim(claim string, uuids []string) error {
	holds := make([]Hold, len(uuids))
	for i, u := range uuids {
		holds[i] = Hold{Device: u}
	}
	return l.Hold(claim, holds)
}

// Hold is HoldForClaim with the GPU of each MIG device: the plugin must
// not have given that GPU whole to a pod, and cannot while the claim holds
// the MIG device.
func (l *Ledger) Hold(claim string, holds []Hold) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range holds {
		if h.GPU != "" && l.pluginHeldLocked(h.GPU) {
			return fmt.Errorf("device %s: its GPU %s %w by a pod the device plugin gave it to", h.Device, h.GPU, ErrHeld)
		}
	}
	for _, h := range holds {
		u := h.Device
		if other, ok := l.claims[u]; ok && other != claim {
			return fmt.Errorf("device %s: %w by ResourceClaim %s", u, ErrHeld, other)
		}
		if l.pluginHeldLocked(u) {
			return fmt.Errorf("device %s: %w by a pod the device plugin gave it to", u, ErrHeld)
		}
		if err := l.checkShareLocked(claim, h); err != nil {
			return err
		}
	}
	changed := false
	for _, h := range holds {
		if h.Share > 0 {
			if l.shares[h.Device] == nil {
				l.shares[h.Device] = map[string]int64{}
			}
			if l.shares[h.Device][claim] != h.Share {
				l.shares[h.Device][claim] = h.Share
				changed = true
			}
			continue
		}
		if _, ok := l.claims[h.Device]; !ok {
			l.claims[h.Device] = claim
			changed = true
		}
		if h.GPU != "" {
			l.onGPU[h.Device] = h.GPU
		}
	}
	if changed {
		l.notifyLocked()
	}
	return nil
}

// checkShareLocked refuses a whole hold of a GPU others hold shares of,
// and a share that does not fit beside the others' shares.
func (l *Ledger) checkShareLocked(claim string, h Hold) error {
	var others int64
	var first string
	for c, b := range l.shares[h.Device] {
		if c != claim {
			others += b
			if first == "" || c < first {
				first = c
			}
		}
	}
	switch {
	case h.Share <= 0 && others > 0:
		return fmt.Errorf("device %s: %w in part by ResourceClaim %s (and maybe others)", h.Device, ErrHeld, first)
	case h.Share > 0 && (h.Of <= 0 || h.Share > h.Of):
		return fmt.Errorf("device %s: a share of %d bytes of %d is impossible", h.Device, h.Share, h.Of)
	case h.Share > 0 && others+h.Share > h.Of:
		return fmt.Errorf("device %s: a share of %d MiB does not fit: other claims hold %d MiB of its %d MiB: %w", h.Device, h.Share>>20, others>>20, h.Of>>20, ErrHeld)
	}
	return nil
}

// Shares returns the bytes each claim holds of a GPU by shares.
func (l *Ledger) Shares(uuid string) map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.shares[uuid])
}

// ReleaseClaim drops every hold of claim.
func (l *Ledger) ReleaseClaim(claim string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := false
	for u, byClaim := range l.shares {
		if _, ok := byClaim[claim]; ok {
			delete(byClaim, claim)
			changed = true
			if len(byClaim) == 0 {
				delete(l.shares, u)
			}
		}
	}
	for u, c := range l.claims {
		if c == claim {
			delete(l.claims, u)
			delete(l.onGPU, u)
			changed = true
		}
	}
	if changed {
		l.notifyLocked()
	}
}

// Allocated records that the device plugin handed out uuids in Allocate,
// or refuses when a claim holds one of them.
func (l *Ledger) Allocated(uuids []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range uuids {
		if c, ok := l.claimOfLocked(u); ok {
			return fmt.Errorf("device %s: %w by ResourceClaim %s", u, ErrHeld, c)
		}
	}
	t := l.now()
	changed := false
	for _, u := range uuids {
		if !l.plugin[u] {
			changed = changed || l.allocated[u].IsZero()
			l.allocated[u] = t
		}
	}
	if changed {
		l.notifyLocked()
	}
	return nil
}

// SetPluginHeld replaces the devices pods hold through the device plugin,
// as the PodResources API lists them now.
func (l *Ledger) SetPluginHeld(uuids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := make(map[string]bool, len(uuids))
	for _, u := range uuids {
		next[u] = true
	}
	cutoff := l.now().Add(-allocateGrace)
	for u, t := range l.allocated {
		if next[u] || t.Before(cutoff) {
			delete(l.allocated, u)
		}
	}
	if !maps.Equal(next, l.plugin) {
		l.plugin = next
		l.notifyLocked()
	}
}

func (l *Ledger) pluginHeldLocked(u string) bool {
	if l.plugin[u] {
		return true
	}
	t, ok := l.allocated[u]
	return ok && l.now().Sub(t) < allocateGrace
}

// ClaimHolder returns the claim holding the device, or for a GPU a claim
// holding one of its MIG devices, if any.
func (l *Ledger) ClaimHolder(uuid string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claimOfLocked(uuid)
}

func (l *Ledger) claimOfLocked(uuid string) (string, bool) {
	if c, ok := l.claims[uuid]; ok {
		return c, true
	}
	if byClaim := l.shares[uuid]; len(byClaim) > 0 {
		return slices.Min(slices.Collect(maps.Keys(byClaim))), true
	}
	for dev, g := range l.onGPU {
		if g == uuid {
			return l.claims[dev], true
		}
	}
	return "", false
}

// ClaimsOn lists the claims holding the GPU of gpuUUID whole or one of
// its MIG devices, sorted: whoever changes that GPU's layout or resets it
// must first have their pods gone.
func (l *Ledger) ClaimsOn(gpuUUID string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := map[string]bool{}
	if c, ok := l.claims[gpuUUID]; ok {
		set[c] = true
	}
	for dev, g := range l.onGPU {
		if g == gpuUUID {
			set[l.claims[dev]] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// PluginHeld reports whether the device plugin gave the device to a pod.
func (l *Ledger) PluginHeld(uuid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pluginHeldLocked(uuid)
}

// Claimed lists the devices claims hold, sorted.
func (l *Ledger) Claimed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Collect(maps.Keys(l.claims))
	for u := range l.shares {
		if _, whole := l.claims[u]; !whole {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// Changes returns a channel that receives (coalesced) after every change,
// and a function that stops it.
func (l *Ledger) Changes() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}
}

func (l *Ledger) notifyLocked() {
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
