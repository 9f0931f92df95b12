// Package cliutil holds what every gpuplane command shares: exit codes,
// usage errors and the -o table|json|yaml|wide output formats. It must stay
// free of any sub-command's logic.
package cliutil
