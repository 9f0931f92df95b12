package cliutil

import (
	"errors"
	"fmt"
	"io"
)

// UsageError marks an error in how a command was called; it exits with 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Exit prints err the way every gpuplane command does and maps it to an
// exit code: 0 on success, 2 for usage errors, 1 for everything else.
func Exit(err error, name string, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ue *UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}
