package cliutil

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type fakeCmd struct{ group bool }

func (fakeCmd) UseLine() string                 { return "gpuplane simulate [flags]" }
func (fakeCmd) CommandPath() string             { return "gpuplane simulate" }
func (c fakeCmd) HasAvailableSubCommands() bool { return c.group }

func TestExit(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	tests := []struct {
		name string
		err  error
		ran  Command
		code int
		want string
	}{
		{name: "success", err: nil, code: 0, want: ""},
		{name: "failure", err: errors.New("reading trace: no such file"), code: 1, want: "gpuplane: reading trace: no such file\n"},
		{name: "flag error prints the usage line", err: FlagError(fakeCmd{}, errors.New("unknown flag: --nope")), code: 2,
			want: "gpuplane: unknown flag: --nope\nUsage: gpuplane simulate [flags]\nRun 'gpuplane simulate --help' for the flags and examples.\n"},
		{name: "a command of sub-commands names them", err: FlagError(fakeCmd{group: true}, errors.New(`unknown command "x"`)), code: 2,
			want: "gpuplane: unknown command \"x\"\nUsage: gpuplane simulate [command]\nRun 'gpuplane simulate --help' for the flags and examples.\n"},
		{name: "usage error of the command that ran", err: Usagef("--tune must be >= 0"), ran: fakeCmd{}, code: 2,
			want: "gpuplane: --tune must be >= 0\nUsage: gpuplane simulate [flags]\nRun 'gpuplane simulate --help' for the flags and examples.\n"},
		{name: "usage error without a command", err: Usagef("--tune must be >= 0"), code: 2, want: "gpuplane: --tune must be >= 0\n"},
		{name: "silent failure", err: &SilentError{Err: errors.New("a check failed")}, code: 1, want: ""},
		{name: "connection refused", err: fmt.Errorf("listing nodes: %w", refused), code: 3,
			want: "gpuplane: listing nodes: Get \"https://127.0.0.1:1/api\": dial tcp: connect: connection refused\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := Exit(tt.err, tt.ran, "gpuplane", &out); code != tt.code || out.String() != tt.want {
				t.Errorf("Exit = %d, %q; want %d, %q", code, out.String(), tt.code, tt.want)
			}
		})
	}
}

// TestCode is the classification: what the server never answered is 3,
// whatever it answered is 1.
func TestCode(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name string
		err  error
		code int
	}{
		{"refused", fmt.Errorf("x: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), 3},
		{"dns", fmt.Errorf("x: %w", &url.Error{Op: "Get", Err: &net.DNSError{Err: "no such host", Name: "api.example"}}), 3},
		{"client timeout", &url.Error{Op: "Get", Err: context.DeadlineExceeded}, 3},
		{"unknown certificate authority", fmt.Errorf("x: %w", x509.UnknownAuthorityError{}), 3},
		{"wrong host in certificate", x509.HostnameError{Host: "api"}, 3},
		{"401", apierrors.NewUnauthorized("token expired"), 3},
		{"no dev cluster", &UnreachableError{Err: errors.New("no dev cluster runs")}, 3},
		{"403 is an answer", apierrors.NewForbidden(gr, "n", errors.New("RBAC")), 1},
		{"404 is an answer", apierrors.NewNotFound(gr, "n"), 1},
		{"server timeout is an answer", apierrors.NewTimeoutError("slow", 1), 1},
		{"usage wins", &UsageError{Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}, 2},
		{"plain", errors.New("no"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Code(tt.err); got != tt.code {
				t.Errorf("Code(%v) = %d, want %d", tt.err, got, tt.code)
			}
		})
	}
}
