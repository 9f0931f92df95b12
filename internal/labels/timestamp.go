package labels

import "strconv"

// TimestampLabeler labels nvidia.com/gfd.timestamp with the time of the
// pass in seconds since the epoch. It is off by default: it changes every
// pass and so makes every pass a write.
type TimestampLabeler struct{}

var _ Labeler = (*TimestampLabeler)(nil)

// NewTimestampLabeler returns a TimestampLabeler.
func NewTimestampLabeler() (*TimestampLabeler, error) { return &TimestampLabeler{}, nil }

// Name implements Labeler.
func (*TimestampLabeler) Name() string { return "timestamp" }

// Label implements Labeler.
func (*TimestampLabeler) Label(in *Input, out Labels) error {
	out[Prefix+"gfd.timestamp"] = strconv.FormatInt(in.Now.Unix(), 10)
	return nil
}
