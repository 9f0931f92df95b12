package cliutil

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestDurationVar(t *testing.T) {
	tests := []struct {
		arg     string
		want    time.Duration
		bad     bool
		warning bool
	}{
		{arg: "", want: 300 * time.Second},
		{arg: "5m", want: 5 * time.Minute},
		{arg: "90s", want: 90 * time.Second},
		{arg: "120", want: 120 * time.Second, warning: true},
		{arg: "0", want: 0, warning: true},
		{arg: "soon", bad: true},
		{arg: "-5", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			var d time.Duration
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			var stderr bytes.Buffer
			cmd.SetErr(&stderr)
			DurationVar(cmd, &d, "mig-layout-dwell", 300*time.Second, "dwell")
			args := []string{}
			if tt.arg != "" {
				args = []string{"--mig-layout-dwell", tt.arg}
			}
			cmd.SetArgs(args)
			err := cmd.Execute()
			if tt.bad {
				if err == nil || !strings.Contains(err.Error(), "mig-layout-dwell") {
					t.Fatalf("error %v, want one naming the flag", err)
				}
				return
			}
			if err != nil || d != tt.want {
				t.Fatalf("= %v, %v; want %v", d, err, tt.want)
			}
			if got := strings.Contains(stderr.String(), "deprecated"); got != tt.warning {
				t.Fatalf("deprecation note %v (%q), want %v", got, stderr.String(), tt.warning)
			}
		})
	}
}
