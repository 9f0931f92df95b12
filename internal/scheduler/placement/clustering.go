package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// GPUClustering keeps pods with the same GPU request together: it prefers
// the node holding the most pods that asked for the same share of a GPU
// (whole GPUs count as a share of 1000). Scale: a pod count.
type GPUClustering struct{}

var _ PodMixScorer = (*GPUClustering)(nil)

// NewGPUClustering returns the GPU clustering plugin.
func NewGPUClustering() *GPUClustering { return &GPUClustering{} }

// Name implements Scorer.
func (*GPUClustering) Name() string { return "gpuclustering" }

// NodeLocal implements NodeLocal.
func (*GPUClustering) NodeLocal() {}

// UsesPodMix implements PodMixScorer.
func (*GPUClustering) UsesPodMix() {}

// Score implements Scorer.
func (*GPUClustering) Score(s *State, req *model.Request, o *Option) float64 {
	if !req.UsesGPU() {
		return 0
	}
	size := req.GPUMilli
	if req.Replicas > 0 && len(o.Shares) == 1 {
		size = o.Shares[0].Milli // as State.apply counts it
	}
	if req.GPUs > 0 && (req.Replicas == 0 || len(o.Shares) != 1) {
		size = model.MilliPerGPU
	}
	return float64(s.Nodes[o.Node].ShareSizes[size])
}
