package gpunode

import (
	"fmt"
	"strconv"
)

// ParseGPUCount reads the value of LabelGPUCount: 0..MaxGPUs.
func ParseGPUCount(s string) (int, error) {
	return boundedInt(LabelGPUCount, s, 0, MaxGPUs)
}

// ParseReplicas reads the value of LabelGPUReplicas: 1..MaxReplicas.
func ParseReplicas(s string) (int, error) {
	return boundedInt(LabelGPUReplicas, s, 1, MaxReplicas)
}

// ParseGPUMemoryMiB reads the value of LabelGPUMemory: 0..MaxGPUMemoryMiB.
func ParseGPUMemoryMiB(s string) (int64, error) {
	v, err := boundedInt(LabelGPUMemory, s, 0, MaxGPUMemoryMiB)
	return int64(v), err
}

func boundedInt(key, s string, lo, hi int) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s: must be a whole number from %d to %d, got %q", key, lo, hi, truncate(s))
	}
	return v, nil
}

// truncate keeps an error message short whatever the input's size.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
