package cliutil

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// durationValue is a duration flag that also takes a bare number of
// seconds, the unit some flags had before every binary agreed on
// durations; a bare number still works and prints a deprecation note.
type durationValue struct {
	d    *time.Duration
	name string
	cmd  *cobra.Command
}

func (v durationValue) String() string { return v.d.String() }
func (v durationValue) Type() string   { return "duration" }
func (v durationValue) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > int64(100*365*24*time.Hour/time.Second) {
			return fmt.Errorf("%d seconds: out of range", n)
		}
		*v.d = time.Duration(n) * time.Second
		fmt.Fprintf(v.cmd.ErrOrStderr(), "Flag --%s: a bare number of seconds is deprecated, give a duration such as %s\n", v.name, v.d)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want a duration such as 90s or 5m", s)
	}
	*v.d = d
	return nil
}

// DurationVar registers a duration flag on cmd that also takes a bare
// number of seconds (deprecated).
func DurationVar(cmd *cobra.Command, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	cmd.Flags().Var(durationValue{d: p, name: name, cmd: cmd}, name, usage)
}
