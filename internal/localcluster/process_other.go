//go:build !linux

package localcluster

import "syscall"

// dieWithParent does nothing where the kernel offers no parent-death
// signal: children are stopped by `gpuplane dev down` or the process group.
func dieWithParent(*syscall.SysProcAttr) {}
