package localcluster

import "syscall"

// dieWithParent has the kernel kill the child when the process that
// started it dies, so that a crashed `gpuplane dev up` leaves no
// components running.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
