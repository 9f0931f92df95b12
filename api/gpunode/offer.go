package gpunode

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// OfferAnnotation says, on a Node made from a node pool gpuplane published
// (internal/nodeoffer), which device-plugin resources the node's agent will
// advertise once it runs: "nvidia.com/gpu=32" for a DGX H100 time-sliced
// four ways. Until the node has registered them, gpuplane-scheduler counts
// the node as coming with those GPUs, and waits for it rather than have
// another node bought.
const OfferAnnotation = "gpuplane.io/gpu-offer"

// maxOfferEntries bounds the resources one offer names: whole GPUs, shared
// replicas and the MIG profiles of one node.
const maxOfferEntries = 16

// ParseOffer reads the value of OfferAnnotation: comma-separated
// NAME=COUNT, each NAME one of gpuplane's GPU resources (ResourceGPU,
// ResourceGPUShared, a MIG resource), given once, each COUNT from 0 to
// MaxGPUs x MaxReplicas.
func ParseOffer(s string) (map[string]int64, error) {
	if s == "" {
		return nil, fmt.Errorf("%s: must name at least one resource, got \"\"", OfferAnnotation)
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxOfferEntries {
		return nil, fmt.Errorf("%s: at most %d resources, got %d", OfferAnnotation, maxOfferEntries, len(parts))
	}
	out := make(map[string]int64, len(parts))
	for _, p := range parts {
		name, count, ok := strings.Cut(p, "=")
		_, mig := MIGProfile(name)
		if !ok || name != ResourceGPU && name != ResourceGPUShared && !mig {
			return nil, fmt.Errorf("%s: want NAME=COUNT with NAME %s, %s or %s<profile>, got %q", OfferAnnotation, ResourceGPU, ResourceGPUShared, MIGResourcePrefix, truncate(p))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: %s given twice", OfferAnnotation, truncate(name))
		}
		v, err := strconv.ParseInt(count, 10, 64)
		if err != nil || v < 0 || v > MaxGPUs*MaxReplicas {
			return nil, fmt.Errorf("%s: %s: must be a whole number from 0 to %d, got %q", OfferAnnotation, truncate(name), MaxGPUs*MaxReplicas, truncate(count))
		}
		out[name] = v
	}
	return out, nil
}

// FormatOffer writes resources as OfferAnnotation's value, by name.
func FormatOffer(resources map[string]int64) string {
	parts := make([]string, 0, len(resources))
	for _, k := range slices.Sorted(maps.Keys(resources)) {
		parts = append(parts, k+"="+strconv.FormatInt(resources[k], 10))
	}
	return strings.Join(parts, ",")
}
