package labels

import (
	"strconv"
)

// SharingLabeler labels nvidia.com/mps.capable: "true" when some resource
// is shared through MPS, so that pods needing an MPS daemon can select the
// node.
type SharingLabeler struct {
	mps bool
}

var _ Labeler = (*SharingLabeler)(nil)

// NewSharingLabeler returns a SharingLabeler for cfg.
func NewSharingLabeler(cfg Config) (*SharingLabeler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mps := false
	for _, s := range cfg.Sharing {
		mps = mps || s.Strategy == SharingMPS
	}
	return &SharingLabeler{mps: mps}, nil
}

// Name implements Labeler.
func (*SharingLabeler) Name() string { return "sharing" }

// Label implements Labeler.
func (s *SharingLabeler) Label(in *Input, out Labels) error {
	if len(in.Devices) == 0 {
		return nil
	}
	out[Prefix+"mps.capable"] = strconv.FormatBool(s.mps)
	return nil
}
