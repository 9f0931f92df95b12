//go:build !linux

package dra

import "errors"

// SysfsPCIeRoot reads the root complex from Linux's sysfs; elsewhere (the
// CLI on a workstation, whose simulated nodes derive roots from their
// topology) it always fails, and callers fall back as they do when sysfs
// cannot say.
func SysfsPCIeRoot(string) PCIeRootFunc {
	return func(string) (string, error) {
		return "", errors.New("the PCIe root complex is read from Linux's sysfs")
	}
}
