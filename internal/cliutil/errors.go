package cliutil

import (
	"errors"
	"fmt"
	"io"
)

// UsageError marks an error in how a command was called; it exits with 2.
// UseLine and Command, when set, are printed after the error: the
// command's usage line and the command whose --help says more.
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

// Exit prints err the way every gpuplane command does and maps it to an
// exit code: 0 on success, 2 for usage errors, 1 for everything else.
func Exit(err error, name string, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var se *SilentError
	if errors.As(err, &se) {
		return 1
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ue *UsageError
	if errors.As(err, &ue) {
		if ue.UseLine != "" {
			fmt.Fprintf(stderr, "Usage: %s\n", ue.UseLine)
		}
		if ue.Command != "" {
			fmt.Fprintf(stderr, "Run '%s --help' for the flags and examples.\n", ue.Command)
		}
		return 2
	}
	return 1
}

// FlagError wraps a flag-parsing error of cmd as a UsageError that prints
// cmd's usage line: cobra's SetFlagErrorFunc takes it.
func FlagError(cmd interface {
	UseLine() string
	CommandPath() string
}, err error) error {
	return &UsageError{Err: err, UseLine: cmd.UseLine(), Command: cmd.CommandPath()}
}
