package gpunode

import "strings"

// Extended resources a GPU node offers through gpuplane-agent's device
// plugin: NVIDIA's names, so existing pod specs keep working.
const (
	// ResourceGPU is a whole GPU, or a replica of a shared GPU when the
	// sharing config does not rename it.
	ResourceGPU = "nvidia.com/gpu"
	// ResourceGPUShared is a replica of a shared GPU when the sharing
	// config renames it (renameByDefault).
	ResourceGPUShared = "nvidia.com/gpu.shared"
	// MIGResourcePrefix starts the name of a MIG device's resource under
	// the mixed strategy: nvidia.com/mig-<profile>, e.g.
	// nvidia.com/mig-3g.40gb.
	MIGResourcePrefix = "nvidia.com/mig-"
)

// MIGProfile returns the profile a MIG resource name carries ("3g.40gb"
// for nvidia.com/mig-3g.40gb), and whether name is a MIG resource.
func MIGProfile(name string) (string, bool) {
	p, ok := strings.CutPrefix(name, MIGResourcePrefix)
	if !ok || p == "" {
		return "", false
	}
	return p, true
}
