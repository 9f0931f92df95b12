package gomem

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// LimitShare is the part of the container's memory limit the Go heap may
// grow to before the collector works harder: the rest is left to stacks,
// the runtime and memory not yet returned to the system.
const LimitShare = 0.9

// Settings is what Apply chose, for the process's start-up log line.
type Settings struct {
	// GCPercent is the collector's GOGC in force; FromEnv says whether the
	// environment set it.
	GCPercent int
	GCFromEnv bool
	// Limit is the soft memory limit in bytes (math.MaxInt64: none);
	// LimitFrom says where it came from: "GOMEMLIMIT", the cgroup file
	// read, or "" for none.
	Limit     int64
	LimitFrom string
}

// Apply sets the collector's percentage to gcPercent unless GOGC is set,
// and, unless GOMEMLIMIT is set, a soft memory limit of LimitShare of the
// memory limit of the cgroup found under cgroupRoot (normally
// /sys/fs/cgroup; v2's memory.max, else v1's memory.limit_in_bytes). With
// no limit there (none set, or not in a container), the heap has no soft
// limit. A cgroup file that cannot be read or parsed leaves the limit off
// and is returned as an error, which the caller logs: never fatal.
func Apply(getenv func(string) string, cgroupRoot string, gcPercent int) (Settings, error) {
	var s Settings
	if v := getenv("GOGC"); v != "" {
		s.GCFromEnv = true
		s.GCPercent = debug.SetGCPercent(-1) // read what the runtime parsed
		debug.SetGCPercent(s.GCPercent)
	} else {
		debug.SetGCPercent(gcPercent)
		s.GCPercent = gcPercent
	}
	s.Limit = math.MaxInt64
	if getenv("GOMEMLIMIT") != "" {
		s.Limit, s.LimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
		return s, nil
	}
	limit, file, err := CgroupLimit(cgroupRoot)
	if err != nil || limit <= 0 {
		return s, err
	}
	s.Limit, s.LimitFrom = int64(float64(limit)*LimitShare), file
	debug.SetMemoryLimit(s.Limit)
	return s, nil
}

// maxLimit is beyond any real container's memory: v1 reports "no limit" as
// a number close to MaxInt64.
const maxLimit = 1 << 50

// CgroupLimit returns the memory limit in bytes of the cgroup at root and
// the file it read, or 0 when none is set or no cgroup file is there.
func CgroupLimit(root string) (int64, string, error) {
	for _, name := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		file := filepath.Join(root, name)
		b, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, file, fmt.Errorf("reading the container's memory limit: %w", err)
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, file, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, file, fmt.Errorf("reading the container's memory limit: %s holds %q, not a number of bytes or \"max\"", file, truncate(v))
		}
		if n >= maxLimit {
			return 0, file, nil
		}
		return n, file, nil
	}
	return 0, "", nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
