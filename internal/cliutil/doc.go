// Package cliutil holds what every gpuplane command shares, so that each
// convention is implemented once: the exit codes and the one function
// that classifies an error into them (Code, Exit), usage errors that
// print the usage line, the conventions applied to a whole command tree
// (Apply: argument counts, unknown sub-commands and flags as usage
// errors), the -o table|wide|json|yaml flag (AddOutputFlag), and
// duration flags that still take a bare number of seconds (DurationVar).
// kubectl's cluster flags are in clusterflags, which gpuplane-agent must
// not link. It must stay free of any sub-command's logic.
package cliutil
