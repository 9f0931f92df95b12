package mig

import (
	"fmt"
	"sort"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
)

// CheckStrategy refuses a plan whose MIG devices the device plugin's MIG
// strategy would not offer to pods, before anything is evicted:
//   - none offers no MIG device, so a plan that turns MIG on for a GPU is
//     refused;
//   - single offers one profile as nvidia.com/gpu, so every GPU in MIG mode
//     after the plan must hold devices of one and the same profile;
//   - mixed (or empty: not known) offers any layout.
func CheckStrategy(strategy string, p *Plan) error {
	switch strategy {
	case configv1.MIGStrategyNone:
		for _, c := range p.Changes {
			if c.To.Enabled {
				return fmt.Errorf("%s: GPU %d: %w: the device plugin's MIG strategy is none, so MIG devices are not offered to pods; set flags.migStrategy (or --mig-strategy) to mixed", c.Entry, c.Index, ErrInvalid)
			}
		}
	case configv1.MIGStrategySingle:
		profile, first := "", -1
		indices := make([]int, 0, len(p.Targets))
		for i := range p.Targets {
			indices = append(indices, i)
		}
		sort.Ints(indices)
		for _, i := range indices {
			l := p.Targets[i]
			if !l.Enabled {
				continue
			}
			ps := l.Profiles()
			if len(ps) == 0 {
				continue
			}
			for _, q := range ps {
				if profile == "" {
					profile, first = q, i
				}
				if q != profile {
					return fmt.Errorf("GPU %d would hold %s and GPU %d %s: %w: the device plugin's MIG strategy is single, which offers one MIG profile for the whole node; set flags.migStrategy (or --mig-strategy) to mixed, or give every GPU the same profile", first, profile, i, q, ErrInvalid)
				}
			}
		}
	}
	return nil
}
