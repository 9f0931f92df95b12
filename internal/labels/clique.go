package labels

import (
	"github.com/gpuplane/gpuplane/api/gpunode"
)

// CliqueLabeler labels nvidia.com/gpu.clique, the multi-node NVLink domain
// of the node's GPUs, from NVML's GPU fabric info, as GPU Feature
// Discovery does: only GPUs whose registration with the fabric completed
// without error under a non-zero cluster UUID count; when none does, or
// those that do disagree on the cluster UUID or the clique ID, the label
// is left off, so no node claims a domain it cannot vouch for.
type CliqueLabeler struct{}

var _ Labeler = (*CliqueLabeler)(nil)

// NewCliqueLabeler returns a CliqueLabeler.
func NewCliqueLabeler() (*CliqueLabeler, error) { return &CliqueLabeler{}, nil }

// Name implements Labeler.
func (*CliqueLabeler) Name() string { return "clique" }

// Label implements Labeler.
func (*CliqueLabeler) Label(in *Input, out Labels) error {
	var cluster string
	var clique uint32
	attached := 0
	for _, f := range in.Fabrics {
		if !f.Attached() {
			continue
		}
		if attached > 0 && (f.ClusterUUID != cluster || f.CliqueID != clique) {
			return nil
		}
		cluster, clique = f.ClusterUUID, f.CliqueID
		attached++
	}
	if attached > 0 {
		out[gpunode.LabelGPUClique] = sanitizeValue(gpunode.CliqueValue(cluster, clique))
	}
	return nil
}
