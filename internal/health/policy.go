package health

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
)

// Environment variables with NVIDIA's device plugin semantics.
const (
	// EnvDisableHealthChecks: "all" (or "xids") switches checks off; a
	// comma-separated list of XIDs ignores those XIDs too.
	EnvDisableHealthChecks = "DP_DISABLE_HEALTHCHECKS"
	// EnvEnableHealthChecks: "all" makes every XID critical, including the
	// default-ignored ones; a list of XIDs makes those critical whatever
	// else says.
	EnvEnableHealthChecks = "DP_ENABLE_HEALTHCHECKS"
)

// DefaultIgnoredXIDs are XIDs caused by applications rather than the GPU:
// 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
// processing, 45 preemptive cleanup, 68 video processor exception, 109
// context switch timeout.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Policy says which events make a device unhealthy and when it recovers.
type Policy struct {
	// Disabled switches every check off: all devices stay healthy.
	Disabled bool
	// Probation is how long a device must be free of critical events
	// before it is probed and may return to Healthy; zero never recovers.
	Probation time.Duration
	ignored   map[uint64]bool
	critical  map[uint64]bool
	allXIDs   bool
}

// Critical reports whether an XID makes a device unhealthy.
func (p *Policy) Critical(xid uint64) bool {
	switch {
	case p.Disabled:
		return false
	case p.critical[xid]:
		return true
	case p.ignored[xid]:
		return false
	case p.allXIDs:
		return true
	}
	return !slices.Contains(DefaultIgnoredXIDs, xid)
}

// NewPolicy builds the policy from the config's health section and the
// environment (read through lookup); the environment wins over the file.
func NewPolicy(h configv1.Health, lookup func(string) (string, bool)) (Policy, error) {
	p := Policy{Disabled: h.Disabled, ignored: map[uint64]bool{}, critical: map[uint64]bool{}}
	if h.Probation != nil {
		p.Probation = h.Probation.Duration
	} else {
		p.Probation = configv1.DefaultProbation
	}
	for _, x := range h.IgnoredXIDs {
		p.ignored[x] = true
	}
	for _, x := range h.CriticalXIDs {
		p.critical[x] = true
	}
	if v, ok := lookup(EnvDisableHealthChecks); ok {
		all, xids, err := parseXIDList(EnvDisableHealthChecks, v, "xids")
		if err != nil {
			return p, err
		}
		if all {
			p.Disabled = true
		}
		for _, x := range xids {
			p.ignored[x] = true
		}
	}
	if v, ok := lookup(EnvEnableHealthChecks); ok {
		all, xids, err := parseXIDList(EnvEnableHealthChecks, v, "xids")
		if err != nil {
			return p, err
		}
		p.allXIDs = all
		for _, x := range xids {
			p.critical[x] = true
		}
	}
	return p, nil
}

// parseXIDList reads "all", an alias of it, or comma-separated XIDs.
func parseXIDList(name, v, alias string) (bool, []uint64, error) {
	var all bool
	var out []uint64
	for _, part := range strings.Split(v, ",") {
		part = strings.ToLower(strings.TrimSpace(part))
		switch part {
		case "":
			continue
		case "all", alias:
			all = true
			continue
		}
		x, err := strconv.ParseUint(part, 10, 64)
		if err != nil {
			return false, nil, fmt.Errorf("environment variable %s: %q is not an XID; want \"all\" or comma-separated XID numbers", name, part)
		}
		out = append(out, x)
	}
	return all, out, nil
}
