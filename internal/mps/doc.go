// Package mps starts and supervises the CUDA MPS control daemon of each
// MPS-shared resource: one daemon per resource, limited to that resource's
// GPUs, with its pipe and log directories under the MPS root, the default
// active-thread percentage and pinned-memory limit of one replica, and a
// restart with back-off when it exits unexpectedly. A daemon outlives an
// agent that is killed; before its first start, a daemon asks the one left
// at its pipe directory to quit (QuitLeftover), which would otherwise hold
// the directory.
//
// Processes are started through a Runner so that everything but the real
// binary can be tested on machines without GPUs. The package must not
// decide resources or talk to the kubelet.
package mps
