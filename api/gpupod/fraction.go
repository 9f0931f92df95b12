package gpupod

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// How a pod asks for part of one GPU. gpuplane's own annotations come
// first; the names users already have in their pod specs are read too:
// HAMi's resources (with nvidia.com/gpu as the number of GPUs to share)
// and KAI's annotations.
const (
	// FractionAnnotation asks for that part of one GPU's compute, a
	// decimal in (0, 1] ("0.25").
	FractionAnnotation = "gpuplane.io/gpu-fraction"
	// MemoryAnnotation asks for that much of one GPU's memory, a quantity
	// ("20Gi", "20000Mi").
	MemoryAnnotation = "gpuplane.io/gpu-memory"

	// HAMiMemory is HAMi's GPU memory in MiB.
	HAMiMemory corev1.ResourceName = "nvidia.com/gpumem"
	// HAMiMemoryPercentage is HAMi's GPU memory as a percentage of the GPU.
	HAMiMemoryPercentage corev1.ResourceName = "nvidia.com/gpumem-percentage"
	// HAMiCores is HAMi's compute share in percent.
	HAMiCores corev1.ResourceName = "nvidia.com/gpucores"

	// KAIFraction is KAI's fraction annotation, a decimal in (0, 1].
	KAIFraction = "gpu-fraction"
	// KAIMemory is KAI's memory annotation, in MiB.
	KAIMemory = "gpu-memory"
)

// MaxFractionMemoryMiB bounds the memory one fraction may ask for (no GPU
// has 16 TiB).
const MaxFractionMemoryMiB = 1 << 24

// IsFractionResource reports whether name is one of the resources that ask
// for part of a GPU (HAMi's), which the kubelet does not count and the
// scheduler reads as a fraction.
func IsFractionResource(name corev1.ResourceName) bool {
	return name == HAMiMemory || name == HAMiMemoryPercentage || name == HAMiCores
}

// Fraction is the part of one GPU a pod asks for: Milli thousandths of its
// compute (0: no compute share named) and MemoryMiB of its memory (0: none
// named). Source names what was read, for messages.
type Fraction struct {
	Milli     int64
	MemoryMiB int64
	Source    string
}

// ReadFraction reads the fraction a pod asks for from its annotations and
// its summed requests, each dialect in turn: gpuplane's annotations, then
// HAMi's resources, then KAI's annotations; the first that names compute
// gives it, and the first that names memory gives that. HAMi's
// gpumem-percentage reserves that part of the GPU's compute as well when
// no compute share is named. ok is false when the pod asks for no
// fraction. A value out of range is an error naming the field and what
// it accepts.
func ReadFraction(annotations map[string]string, requests corev1.ResourceList) (f Fraction, ok bool, err error) {
	var sources []string
	setMilli := func(m int64, src string) {
		if f.Milli == 0 {
			f.Milli = m
			sources = append(sources, src)
		}
	}
	setMem := func(m int64, src string) {
		if f.MemoryMiB == 0 {
			f.MemoryMiB = m
			sources = append(sources, src)
		}
	}
	// gpuplane's own.
	if s, has := annotations[FractionAnnotation]; has {
		m, err := parseShare(s)
		if err != nil {
			return f, false, fmt.Errorf("annotation %s: %w", FractionAnnotation, err)
		}
		setMilli(m, FractionAnnotation)
	}
	if s, has := annotations[MemoryAnnotation]; has {
		q, err := resource.ParseQuantity(s)
		if err != nil || q.Sign() <= 0 || q.Cmp(*resource.NewQuantity(MaxFractionMemoryMiB<<20, resource.BinarySI)) > 0 {
			return f, false, fmt.Errorf("annotation %s: %q is not a memory size from 1Mi to 16Ti (\"20Gi\")", MemoryAnnotation, truncate(s))
		}
		setMem((q.Value()+1<<20-1)>>20, MemoryAnnotation)
	}
	// HAMi's resources.
	if q, has := requests[HAMiCores]; has && !q.IsZero() {
		v, exact := q.AsInt64()
		if !exact || v < 1 || v > 100 {
			return f, false, fmt.Errorf("resource %s: %s is not a percentage from 1 to 100", HAMiCores, truncate(q.String()))
		}
		setMilli(v*10, string(HAMiCores))
	}
	if q, has := requests[HAMiMemory]; has && !q.IsZero() {
		v, exact := q.AsInt64()
		if !exact || v < 1 || v > MaxFractionMemoryMiB {
			return f, false, fmt.Errorf("resource %s: %s is not a memory size in MiB from 1 to %d", HAMiMemory, truncate(q.String()), MaxFractionMemoryMiB)
		}
		setMem(v, string(HAMiMemory))
	}
	if q, has := requests[HAMiMemoryPercentage]; has && !q.IsZero() {
		v, exact := q.AsInt64()
		if !exact || v < 1 || v > 100 {
			return f, false, fmt.Errorf("resource %s: %s is not a percentage from 1 to 100", HAMiMemoryPercentage, truncate(q.String()))
		}
		setMilli(v*10, string(HAMiMemoryPercentage))
	}
	// KAI's annotations.
	if s, has := annotations[KAIFraction]; has {
		m, err := parseShare(s)
		if err != nil {
			return f, false, fmt.Errorf("annotation %s: %w", KAIFraction, err)
		}
		setMilli(m, KAIFraction)
	}
	if s, has := annotations[KAIMemory]; has {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || v < 1 || v > MaxFractionMemoryMiB {
			return f, false, fmt.Errorf("annotation %s: %q is not a memory size in MiB from 1 to %d", KAIMemory, truncate(s), MaxFractionMemoryMiB)
		}
		setMem(v, KAIMemory)
	}
	if len(sources) == 0 {
		return Fraction{}, false, nil
	}
	f.Source = strings.Join(sources, ", ")
	return f, true, nil
}

// parseShare reads a fraction of a GPU, a decimal in (0, 1], as
// thousandths (at least 1).
func parseShare(s string) (int64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || v <= 0 || v > 1 || len(s) > 32 {
		return 0, fmt.Errorf("%q is not a fraction of a GPU greater than 0 and at most 1 (\"0.25\")", truncate(s))
	}
	return max(int64(v*MilliPerGPU+0.5), 1), nil
}
