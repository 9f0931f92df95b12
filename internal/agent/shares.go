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
	log     *slog.Logger
	// charged is the part of GPU gpu the pod was given when it asked for
	// part of one (nodePods.chargedShare); nil: replicas count as such.
	charged func(namespace, pod string, gpu int) (float64, bool)

	mu     sync.Mutex
	shares map[string]map[string]deviceShare // resource -> device ID -> share
	slices map[int]int                       // GPU index -> compute slices
}

// deviceShare is a device's part of its GPU, and for a replica the GPU's
// index (-1 for whole GPUs and MIG devices).
type deviceShare struct {
	share   float64
	replica int
}

func newShareBook(backend gpu.Backend, log *slog.Logger) *shareBook {
	return &shareBook{backend: backend, log: log, slices: map[int]int{}}
}

// set takes the resources the plugin serves (at start and after a reload).
func (b *shareBook) set(rs []*sharing.Resource) {
	out := make(map[string]map[string]deviceShare, len(rs))
	for _, r := range rs {
		m := make(map[string]deviceShare, len(r.Devices))
		for i := range r.Devices {
			d := &r.Devices[i]
			switch {
			case d.MIG != nil:
				m[d.ID] = deviceShare{float64(d.MIG.GPUSlices) / float64(b.slicesOf(d.MIG.ParentIndex)), -1}
			case d.Replicas > 1:
				m[d.ID] = deviceShare{1 / float64(d.Replicas), d.GPUIndex}
			default:
				m[d.ID] = deviceShare{1, -1}
			}
		}
		out[r.Name] = m
	}
	b.mu.Lock()
	b.shares = out
	b.mu.Unlock()
}

// of implements metrics.Options.ShareOf.
func (b *shareBook) of(namespace, pod, resource, id string) (float64, bool) {
	b.mu.Lock()
	d, ok := b.shares[resource][id]
	b.mu.Unlock()
	if !ok {
		return 0, false
	}
	if d.replica >= 0 && b.charged != nil {
		if s, ok := b.charged(namespace, pod, d.replica); ok {
			return s, true
		}
	}
	return d.share, true
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
