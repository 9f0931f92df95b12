package labels

// Keys of the labels other parts of gpuplane read (gpuplane-scheduler,
// `gpuplane status`). The labelers build their keys from Prefix and the
// resource they describe; these name the ones for nvidia.com/gpu, so a
// reader never spells a key the labelers do not write (TestReadKeysWritten).
const (
	GPUProduct         = Prefix + "gpu.product"
	GPUMemory          = Prefix + "gpu.memory"
	GPUCount           = Prefix + "gpu.count"
	GPUReplicas        = Prefix + "gpu.replicas"
	GPUSharingStrategy = Prefix + "gpu.sharing-strategy"
	MIGStrategy        = Prefix + "mig.strategy"
)
