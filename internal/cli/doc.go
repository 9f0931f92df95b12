// Package cli builds the gpuplane command tree. Each sub-command lives in
// its own package under internal/cli and is wired here explicitly; this
// package holds only the root command and shared output helpers.
package cli
