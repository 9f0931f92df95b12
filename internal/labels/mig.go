package labels

import (
	"strconv"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// MIGLabeler labels nvidia.com/mig.capable ("true" when a GPU can run MIG),
// nvidia.com/mig.strategy, and under the mixed strategy one group per MIG
// device profile: nvidia.com/mig-<profile>.count, .replicas,
// .sharing-strategy, .product, .memory (MiB), .multiprocessors,
// .slices.gi, .slices.ci and .engines.{copy,decoder,encoder,jpeg,ofa}.
type MIGLabeler struct {
	strategy string
	cfg      Config
}

var _ Labeler = (*MIGLabeler)(nil)

// NewMIGLabeler returns a MIGLabeler for cfg.
func NewMIGLabeler(cfg Config) (*MIGLabeler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	return &MIGLabeler{strategy: cfg.MIGStrategy, cfg: cfg}, nil
}

// Name implements Labeler.
func (*MIGLabeler) Name() string { return "mig" }

// Label implements Labeler.
func (m *MIGLabeler) Label(in *Input, out Labels) error {
	if len(in.Devices) == 0 {
		return nil
	}
	capable := false
	for i := range in.Devices {
		capable = capable || in.Devices[i].MIG.Capable
	}
	out[Prefix+"mig.capable"] = strconv.FormatBool(capable)
	out[gpunode.LabelMIGStrategy] = m.strategy
	if m.strategy != MIGStrategyMixed {
		return nil
	}
	type group struct {
		count int
		mig   *gpu.MIGDevice
	}
	groups := map[string]*group{}
	var order []string
	for i := range in.Devices {
		d := &in.Devices[i]
		if !d.MIG.Current {
			continue
		}
		for j := range d.MIGDevices {
			md := &d.MIGDevices[j]
			g, ok := groups[md.Profile]
			if !ok {
				g = &group{mig: md}
				groups[md.Profile] = g
				order = append(order, md.Profile)
			}
			g.count++
		}
	}
	base := productName(in.Devices[0].Name)
	for _, profile := range order {
		g := groups[profile]
		prefix := Prefix + "mig-" + profile + "."
		writeResource(out, prefix, m.cfg.sharing(Prefix+"mig-"+profile), g.count, base+"-MIG-"+profile)
		writeMIGShape(out, prefix, g.mig)
	}
	return nil
}
