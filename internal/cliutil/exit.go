package cliutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
)

// Exit codes of every gpuplane command. ExitHelp documents them for
// --help and the README.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailed: what was asked failed, or a check found problems.
	ExitFailed = 1
	// ExitUsage: the command was called wrongly (an unknown command or
	// flag, a wrong number of arguments, a bad flag value); the usage
	// line is printed.
	ExitUsage = 2
	// ExitUnreachable: the server the command needs could not be reached:
	// the Kubernetes API server (no usable kubeconfig, connection refused,
	// DNS, TLS, a timeout, credentials refused with 401), Prometheus for
	// cost (the same, and a 401), or the dev cluster for dev fault.
	ExitUnreachable = 3
)

// ExitHelp is the exit-code policy as --help prints it.
const ExitHelp = `Exit status:
  0  success
  1  what was asked failed, or a check found problems (doctor)
  2  usage error: unknown command or flag, wrong arguments, a bad flag
     value; the usage line is printed
  3  the server the command needs cannot be reached: the Kubernetes API
     server (no usable kubeconfig, connection refused, DNS, TLS, timeout,
     credentials refused with 401 Unauthorized), Prometheus (cost) or the
     dev cluster (dev fault). 403 Forbidden is 1: the server answered.`

// UsageError marks an error in how a command was called; it exits with 2.
// UseLine and Command, when set, are printed after the error: the
// command's usage line and the command whose --help says more. Exit
// fills them from the command that ran when they are empty.
type UsageError struct {
	Err     error
	UseLine string
	Command string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// SilentError exits with 1 and prints nothing: the command has said all
// there is to say on its output (a diagnosis with a failed check).
type SilentError struct{ Err error }

func (e *SilentError) Error() string { return e.Err.Error() }
func (e *SilentError) Unwrap() error { return e.Err }

// UnreachableError marks an error as "the server could not be reached"
// where the error itself does not show it (no dev cluster runs, say).
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// Command is what Exit needs of the command that ran: *cobra.Command.
type Command interface {
	UseLine() string
	CommandPath() string
	HasAvailableSubCommands() bool
}

// Code classifies err into an exit code; it is the one place that does.
func Code(err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	if unreachable(err) {
		return ExitUnreachable
	}
	return ExitFailed
}

// unreachable reports whether err says that no answer came from the
// server: the request never got a response (an *url.Error is what Go's
// HTTP client returns then: refused, reset, DNS, TLS, timeouts), no
// usable kubeconfig, or credentials the server refused (401). An answer
// the server gave, 403 included, is not.
func unreachable(err error) bool {
	var (
		ur      *UnreachableError
		urlErr  *url.Error
		opErr   *net.OpError
		dnsErr  *net.DNSError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
		verify  *tls.CertificateVerificationError
		record  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &ur), errors.As(err, &urlErr), errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host), errors.As(err, &verify), errors.As(err, &record):
		return true
	case clientcmd.IsConfigurationInvalid(err), clientcmd.IsEmptyConfig(err):
		return true
	case apierrors.IsUnauthorized(err):
		return true
	}
	return false
}

// Exit prints err the way every gpuplane command does and returns its exit
// code (Code). ran is the command that ran (nil when unknown): a usage
// error is followed by its usage line.
func Exit(err error, ran Command, name string, stderr io.Writer) int {
	code := Code(err)
	if err == nil {
		return code
	}
	var se *SilentError
	if errors.As(err, &se) && code == ExitFailed {
		return code
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ue *UsageError
	if errors.As(err, &ue) {
		useLine, command := ue.UseLine, ue.Command
		if useLine == "" && ran != nil {
			useLine, command = usageLine(ran), ran.CommandPath()
		}
		if useLine != "" {
			fmt.Fprintf(stderr, "Usage: %s\n", useLine)
		}
		if command != "" {
			fmt.Fprintf(stderr, "Run '%s --help' for the flags and examples.\n", command)
		}
	}
	return code
}

// usageLine is a command's usage line; a command of sub-commands names
// them as [command].
func usageLine(c Command) string {
	if c.HasAvailableSubCommands() {
		return c.CommandPath() + " [command]"
	}
	return c.UseLine()
}

// FlagError wraps a flag-parsing error of cmd as a UsageError that prints
// cmd's usage line: cobra's SetFlagErrorFunc takes it.
func FlagError(cmd Command, err error) error {
	return &UsageError{Err: err, UseLine: usageLine(cmd), Command: cmd.CommandPath()}
}
