package cliutil

import (
	"bytes"
	"errors"
	"testing"
)

type fakeCmd struct{}

func (fakeCmd) UseLine() string     { return "gpuplane simulate [flags]" }
func (fakeCmd) CommandPath() string { return "gpuplane simulate" }

func TestExit(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		want string
	}{
		{name: "success", err: nil, code: 0, want: ""},
		{name: "failure", err: errors.New("reading trace: no such file"), code: 1, want: "gpuplane: reading trace: no such file\n"},
		{name: "flag error prints the usage line", err: FlagError(fakeCmd{}, errors.New("unknown flag: --nope")), code: 2,
			want: "gpuplane: unknown flag: --nope\nUsage: gpuplane simulate [flags]\nRun 'gpuplane simulate --help' for the flags and examples.\n"},
		{name: "usage error without a command", err: Usagef("--tune must be >= 0"), code: 2, want: "gpuplane: --tune must be >= 0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := Exit(tt.err, "gpuplane", &out); code != tt.code || out.String() != tt.want {
				t.Errorf("Exit = %d, %q; want %d, %q", code, out.String(), tt.code, tt.want)
			}
		})
	}
}
