package agent

import (
	"context"
	"log/slog"
	"sync"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// shareBook knows what part of its physical GPU each device the plugin
// serves is, for the metrics' container_gpu_allocation: a whole GPU is 1,
// a replica 1/replicas, a MIG device its slices over its GPU's. A pod that
// asked for part of a GPU holds one replica but is charged the part
// gpuplane-scheduler gave it: charged says how much, when it knows.
type shareBook struct {
	backend gpu.Backend
	served  func() *sharing.Served
	log     *slog.Logger
	// charged is the part of GPU gpu the pod was given when it asked for
	// part of one (nodePods.chargedShare); nil: replicas count as such.
	charged func(namespace, pod string, gpu int) (float64, bool)

	mu     sync.Mutex
	slices map[int]int // GPU index -> compute slices
}

// newShareBook reads the devices' shares off served, the resources the
// device plugin serves.
func newShareBook(backend gpu.Backend, served func() *sharing.Served, log *slog.Logger) *shareBook {
	return &shareBook{backend: backend, served: served, log: log, slices: map[int]int{}}
}

// of implements metrics.Options.ShareOf.
func (b *shareBook) of(namespace, pod, resource, id string) (float64, bool) {
	d, ok := b.served().Device(resource, id)
	if !ok {
		return 0, false
	}
	switch {
	case d.MIG != nil:
		b.mu.Lock()
		slices := b.slicesOf(d.MIG.ParentIndex)
		b.mu.Unlock()
		return float64(d.MIG.GPUSlices) / float64(slices), true
	case d.Replicas > 1:
		if b.charged != nil {
			if s, ok := b.charged(namespace, pod, d.GPUIndex); ok {
				return s, true
			}
		}
		return 1 / float64(d.Replicas), true
	default:
		return 1, true
	}
}

// slicesOf is how many compute slices GPU index has in MIG mode: its
// largest MIG profile's, as the backend lists them (7 on A100, H100 and
// later; 4 on A30), remembered; 7 when the backend cannot say. b.mu is
// held.
func (b *shareBook) slicesOf(index int) int {
	if n, ok := b.slices[index]; ok {
		return n
	}
	n := 7
	if mm, ok := b.backend.(gpu.MIGManager); ok {
		profiles, err := mm.MIGProfiles(context.Background(), index)
		if err != nil {
			b.log.Debug("MIG profiles unreadable; counting 7 slices", "gpu", index, "err", err)
		}
		best := 0
		for _, p := range profiles {
			best = max(best, p.SliceCount)
		}
		if best > 0 {
			n = best
		}
	}
	b.slices[index] = n
	return n
}
