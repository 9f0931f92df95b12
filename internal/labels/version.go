package labels

import (
	"fmt"
	"strconv"
	"strings"
)

// VersionLabeler labels the driver and CUDA versions:
// nvidia.com/cuda.driver-version.{major,minor,revision,full} from the
// kernel driver version (550.54.15), nvidia.com/cuda.runtime-version.{major,
// minor,full} from the CUDA version the driver supports (12.4), and the
// deprecated nvidia.com/cuda.driver.{major,minor,rev} and
// nvidia.com/cuda.runtime.{major,minor} with the same values.
type VersionLabeler struct{}

var _ Labeler = (*VersionLabeler)(nil)

// NewVersionLabeler returns a VersionLabeler.
func NewVersionLabeler() (*VersionLabeler, error) { return &VersionLabeler{}, nil }

// Name implements Labeler.
func (*VersionLabeler) Name() string { return "version" }

// Label implements Labeler.
func (*VersionLabeler) Label(in *Input, out Labels) error {
	if in.System.DriverVersion == "" {
		// A node without a driver (the null backend) has no versions.
		return nil
	}
	major, minor, rev, err := splitDriverVersion(in.System.DriverVersion)
	if err != nil {
		return err
	}
	out[Prefix+"cuda.driver-version.major"] = major
	out[Prefix+"cuda.driver-version.minor"] = minor
	out[Prefix+"cuda.driver-version.revision"] = rev
	out[Prefix+"cuda.driver-version.full"] = sanitizeValue(in.System.DriverVersion)
	out[Prefix+"cuda.driver.major"] = major
	out[Prefix+"cuda.driver.minor"] = minor
	out[Prefix+"cuda.driver.rev"] = rev
	if v := in.System.CUDADriverVersion; v > 0 {
		cmaj, cmin := strconv.Itoa(v.Major()), strconv.Itoa(v.Minor())
		out[Prefix+"cuda.runtime-version.major"] = cmaj
		out[Prefix+"cuda.runtime-version.minor"] = cmin
		out[Prefix+"cuda.runtime-version.full"] = v.String()
		out[Prefix+"cuda.runtime.major"] = cmaj
		out[Prefix+"cuda.runtime.minor"] = cmin
	}
	return nil
}

// splitDriverVersion splits "550.54.15" into its parts; the revision is
// empty for a two-part version such as "535.104".
func splitDriverVersion(v string) (major, minor, rev string, err error) {
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return "", "", "", fmt.Errorf("parsing driver version %q: want <major>.<minor>[.<revision>]", v)
	}
	for _, p := range parts {
		if _, err := strconv.Atoi(p); err != nil {
			return "", "", "", fmt.Errorf("parsing driver version %q: %q is not a number", v, p)
		}
	}
	if len(parts) == 3 {
		rev = parts[2]
	}
	return parts[0], parts[1], rev, nil
}
