package framework

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStatusKiB reads a memory field of /proc/<pid>/status (VmRSS, VmHWM,
// RssAnon, ...) in KiB: how benchmarks report a process's memory.
func ProcStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the status of process %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: parsing %s %q: %w", pid, field, rest, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("process %d: no %s in /proc/%d/status", pid, field, pid)
}
