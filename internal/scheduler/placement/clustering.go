package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// GPUClustering keeps pods with the same GPU request together: it prefers
// the node holding the most pods that asked for the same share of a GPU
// (whole GPUs count as a share of 1000). Scale: a pod count.
type GPUClustering struct{}

var _ Scorer = (*GPUClustering)(nil)

// NewGPUClustering returns the GPU clustering plugin.
func NewGPUClustering() *GPUClustering { return &GPUClustering{} }

// Name implements Scorer.
func (*GPUClustering) Name() string { return "gpuclustering" }

// Score implements Scorer. It reads the node's pod mix, which a node's
// signature does not hold, so it is not NodeLocal.
func (*GPUClustering) Score(s *State, req *model.Request, o *Option) float64 {
	if !req.UsesGPU() {
		return 0
	}
	size := req.GPUMilli
	if req.GPUs > 0 {
		size = model.MilliPerGPU
	}
	return float64(s.Nodes[o.Node].ShareSizes[size])
}
