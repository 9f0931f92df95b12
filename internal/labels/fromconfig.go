package labels

import configv1 "github.com/gpuplane/gpuplane/api/config/v1"

// FromDevicePluginConfig maps the device plugin's config onto what the
// labels need: the MIG strategy, which resources are shared and how, the
// machine type file and whether to stamp gfd.timestamp (only when the
// config's flags.gfd.noTimestamp is explicitly false, since a timestamp
// rewrites the Node on every pass). The agent labels its node with it, and
// a node's published offer (internal/nodeoffer) is worked out with it, so
// both say the same.
func FromDevicePluginConfig(cfg *configv1.Config) Config {
	lc := Config{MIGStrategy: cfg.MIGStrategy(), Sharing: map[string]Sharing{}}
	if f := cfg.Flags.GFD.MachineTypeFile; f != nil {
		lc.MachineTypeFile = *f
	}
	if t := cfg.Flags.GFD.NoTimestamp; t != nil && !*t {
		lc.Timestamp = true
	}
	for _, s := range []struct {
		strategy string
		rr       configv1.ReplicatedResources
	}{
		{SharingTimeSlicing, cfg.Sharing.TimeSlicing},
		{SharingMPS, cfg.Sharing.MPS},
	} {
		for _, r := range s.rr.Resources {
			lc.Sharing[r.Name] = Sharing{
				Strategy: s.strategy,
				Replicas: max(r.Replicas, 1),
				Renamed:  r.Rename != "" || s.rr.RenameByDefault,
			}
		}
	}
	return lc
}
