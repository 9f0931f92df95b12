// Package gomem sets the Go runtime's memory targets for gpuplane's
// long-running processes: how much garbage the collector lets the heap
// carry (GOGC) and a soft limit taken from the container's memory limit
// (GOMEMLIMIT), each unless the environment sets it. It reads the cgroup
// files only; it must not decide anything else about the process.
package gomem
