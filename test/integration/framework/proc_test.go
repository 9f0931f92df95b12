package framework

import (
	"os"
	"strings"
	"testing"
)

func TestStatCPUSeconds(t *testing.T) {
	// Fields 3 to 15 of a real stat line: utime 1234 and stime 66 ticks.
	rest := " S 1 2 3 0 -1 4194560 100 0 0 0 1234 66 0 0 20 0 12 0 100 0 0"
	for _, tc := range []struct {
		name, stat string
		want       float64
		err        string
	}{
		{"plain", "42 (gpuplane-sched)" + rest, 13, ""},
		{"command with spaces and parentheses", "42 (a) b (c)" + rest, 13, ""},
		{"no command", "42 gpuplane" + rest, 0, "no command name"},
		{"cut short", "42 (x) S 1 2 3 0 -1 4194560 100 0 0 0 1234", 0, "12 fields"},
		{"ticks not a number", "42 (x) S 1 2 3 0 -1 4194560 100 0 0 0 12a4 66 0", 0, `"12a4"`},
		{"negative ticks", "42 (x) S 1 2 3 0 -1 4194560 100 0 0 0 -5 66 0", 0, `"-5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := statCPUSeconds(tc.stat)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %s", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	t.Run("this process", func(t *testing.T) {
		if cpu, err := ProcCPUSeconds(os.Getpid()); err != nil || cpu < 0 {
			t.Fatalf("got %v, %v; want a CPU time", cpu, err)
		}
	})
}
