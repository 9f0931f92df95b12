package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "unknown flag", args: []string{"--bogus"}, want: []string{"gpuplane-scheduler: unknown flag: --bogus", "Usage: gpuplane-scheduler [flags]", "--help"}},
		{name: "bad value", args: []string{"--cycle-interval", "soon"}, want: []string{"--cycle-interval", "Usage: gpuplane-scheduler [flags]"}},
		{name: "stray argument", args: []string{"run"}, want: []string{`unexpected argument "run"`, "Usage: gpuplane-scheduler [flags]"}},
		{name: "bad log level", args: []string{"--log-level", "loud"}, want: []string{`--log-level "loud"`}},
		{name: "gc percent out of range", args: []string{"--gc-percent", "5"}, want: []string{"--gc-percent 5: want 10 to 1000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if rc := run(tt.args, &out, &out); rc != 2 {
				t.Errorf("exit %d, want 2", rc)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if rc := run([]string{"--version"}, &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "gpuplane-scheduler ") || !strings.Contains(stdout.String(), "go1.") {
		t.Errorf("--version printed %q", stdout.String())
	}
}
