package framework

import (
	"errors"
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

// ProcCPUSeconds returns the CPU time, user and system, that process pid
// has used so far (/proc/<pid>/stat, in the kernel's USER_HZ of 100 ticks
// a second). On a machine shared with other work it measures a process's
// cost better than the wall time its work took.
func ProcCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	cpu, err := statCPUSeconds(string(b))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return cpu, nil
}

// statCPUSeconds reads utime and stime from the text of a /proc/<pid>/stat.
func statCPUSeconds(stat string) (float64, error) {
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses: the fields from 3 on start after the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// utime and stime are fields 14 and 15: here 11 and 12 from 0.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("stat: CPU ticks %q are not a count", s)
		}
		ticks += v
	}
	return float64(ticks) / 100, nil
}
