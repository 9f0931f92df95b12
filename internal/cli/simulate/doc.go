// Package simulate is the `gpuplane simulate` command: it reads a trace,
// runs the scheduler's placement policies on it through package simulator
// and prints, writes and plots the results. It must hold no simulation or
// scheduling logic of its own, only flags, output and files.
package simulate
