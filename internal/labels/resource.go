package labels

import (
	"errors"
	"strconv"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// ResourceGPU is the resource name of whole GPUs, and of MIG devices under
// the single MIG strategy.
const ResourceGPU = gpunode.ResourceGPU

// ResourceLabeler labels what nvidia.com/gpu offers: nvidia.com/gpu.count,
// .replicas, .sharing-strategy, .product (with -SHARED when replicas share a
// device under its plain name), .memory (MiB), .family and
// .compute.major/minor. Under the single MIG strategy nvidia.com/gpu is the
// node's MIG devices, and the labels describe them the way GPU Feature
// Discovery does: product <name>-MIG-<profile>, the MIG device's memory,
// and .multiprocessors, .slices.gi/.ci and .engines.*.
type ResourceLabeler struct {
	migStrategy string
	sharing     Sharing
}

var _ Labeler = (*ResourceLabeler)(nil)

// NewResourceLabeler returns a ResourceLabeler for cfg.
func NewResourceLabeler(cfg Config) (*ResourceLabeler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	return &ResourceLabeler{migStrategy: cfg.MIGStrategy, sharing: cfg.sharing(ResourceGPU)}, nil
}

// Name implements Labeler.
func (*ResourceLabeler) Name() string { return "resource" }

// Label implements Labeler.
func (r *ResourceLabeler) Label(in *Input, out Labels) error {
	if len(in.Devices) == 0 {
		return nil
	}
	first := &in.Devices[0]
	base := productName(first.Name)
	if r.migStrategy == MIGStrategySingle && anyMIGEnabled(in.Devices) {
		return r.labelSingleMIG(in.Devices, base, out)
	}
	full := 0
	for i := range in.Devices {
		if r.migStrategy == MIGStrategyNone || !in.Devices[i].MIG.Current {
			full++
		}
	}
	writeResource(out, Prefix+"gpu.", r.sharing, full, base)
	out[Prefix+"gpu.memory"] = strconv.FormatUint(first.MemoryMiB, 10)
	writeArch(out, first)
	return nil
}

// labelSingleMIG labels nvidia.com/gpu as the node's MIG devices. The single
// strategy needs every GPU in MIG mode with one profile throughout; any
// other layout is labelled as product <name>-MIG-INVALID with a zero count,
// as GPU Feature Discovery does, so that no pod is scheduled onto it.
func (r *ResourceLabeler) labelSingleMIG(devs []gpu.Device, base string, out Labels) error {
	mig, err := singleProfile(devs)
	if err != nil {
		writeResource(out, Prefix+"gpu.", r.sharing, 0, base+"-MIG-INVALID")
		writeArch(out, &devs[0])
		return nil
	}
	count := 0
	for i := range devs {
		count += len(devs[i].MIGDevices)
	}
	writeResource(out, Prefix+"gpu.", r.sharing, count, base+"-MIG-"+mig.Profile)
	writeMIGShape(out, Prefix+"gpu.", mig)
	writeArch(out, &devs[0])
	return nil
}

var errMixedLayout = errors.New("the single MIG strategy needs every GPU in MIG mode with MIG devices of one profile")

func singleProfile(devs []gpu.Device) (*gpu.MIGDevice, error) {
	var first *gpu.MIGDevice
	for i := range devs {
		if !devs[i].MIG.Current || len(devs[i].MIGDevices) == 0 {
			return nil, errMixedLayout
		}
		for j := range devs[i].MIGDevices {
			m := &devs[i].MIGDevices[j]
			if first == nil {
				first = m
			} else if m.Profile != first.Profile {
				return nil, errMixedLayout
			}
		}
	}
	return first, nil
}

func anyMIGEnabled(devs []gpu.Device) bool {
	for i := range devs {
		if devs[i].MIG.Current {
			return true
		}
	}
	return false
}

// writeResource writes <prefix>count, replicas, sharing-strategy and
// product.
func writeResource(out Labels, prefix string, s Sharing, count int, product string) {
	out[prefix+"count"] = strconv.Itoa(count)
	out[prefix+"replicas"] = strconv.Itoa(max(s.Replicas, 1))
	strategy := s.Strategy
	if !s.shared() {
		strategy = SharingNone
	}
	out[prefix+"sharing-strategy"] = strategy
	if s.shared() && !s.Renamed {
		product += "-SHARED"
	}
	out[prefix+"product"] = sanitizeValue(product)
}

// writeMIGShape writes the memory, multiprocessors, slices and engines of a
// MIG device.
func writeMIGShape(out Labels, prefix string, m *gpu.MIGDevice) {
	out[prefix+"memory"] = strconv.FormatUint(m.MemoryMiB, 10)
	out[prefix+"multiprocessors"] = strconv.Itoa(m.MultiprocessorCount)
	out[prefix+"slices.gi"] = strconv.Itoa(m.GPUSlices)
	out[prefix+"slices.ci"] = strconv.Itoa(m.ComputeSlices)
	out[prefix+"engines.copy"] = strconv.Itoa(m.Engines.Copy)
	out[prefix+"engines.decoder"] = strconv.Itoa(m.Engines.Decoder)
	out[prefix+"engines.encoder"] = strconv.Itoa(m.Engines.Encoder)
	out[prefix+"engines.jpeg"] = strconv.Itoa(m.Engines.JPEG)
	out[prefix+"engines.ofa"] = strconv.Itoa(m.Engines.OFA)
}

// writeArch writes the family and compute capability of a GPU.
func writeArch(out Labels, d *gpu.Device) {
	family := d.Architecture
	if family == "" {
		family = gpu.ArchUnknown
	}
	out[Prefix+"gpu.family"] = string(family)
	out[Prefix+"gpu.compute.major"] = strconv.Itoa(d.ComputeCapability.Major)
	out[Prefix+"gpu.compute.minor"] = strconv.Itoa(d.ComputeCapability.Minor)
}
