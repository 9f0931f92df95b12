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
// a replica 1/replicas, a MIG device its slices over its GPU's.
type shareBook struct {
	backend gpu.Backend
	log     *slog.Logger

	mu     sync.Mutex
	shares map[string]map[string]float64 // resource -> device ID -> share
	slices map[int]int                   // GPU index -> compute slices
}

func newShareBook(backend gpu.Backend, log *slog.Logger) *shareBook {
	return &shareBook{backend: backend, log: log, slices: map[int]int{}}
}

// set takes the resources the plugin serves (at start and after a reload).
func (b *shareBook) set(rs []*sharing.Resource) {
	out := make(map[string]map[string]float64, len(rs))
	for _, r := range rs {
		m := make(map[string]float64, len(r.Devices))
		for i := range r.Devices {
			d := &r.Devices[i]
			switch {
			case d.MIG != nil:
				m[d.ID] = float64(d.MIG.GPUSlices) / float64(b.slicesOf(d.MIG.ParentIndex))
			case d.Replicas > 1:
				m[d.ID] = 1 / float64(d.Replicas)
			default:
				m[d.ID] = 1
			}
		}
		out[r.Name] = m
	}
	b.mu.Lock()
	b.shares = out
	b.mu.Unlock()
}

// of implements metrics.Options.ShareOf.
func (b *shareBook) of(resource, id string) (float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.shares[resource][id]
	return s, ok
}

// slicesOf is how many compute slices GPU index has in MIG mode: its
// largest MIG profile's, as the backend lists them (7 on A100, H100 and
// later; 4 on A30), remembered; 7 when the backend cannot say.
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
