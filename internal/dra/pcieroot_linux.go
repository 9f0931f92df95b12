package dra

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// SysfsPCIeRoot reads the root complex from sysfs under root ("/" on a
// node), as Kubernetes' deviceattribute package does.
func SysfsPCIeRoot(root string) PCIeRootFunc {
	return func(busID string) (string, error) {
		a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(root))
		if err != nil {
			return "", err
		}
		if a.Value.StringValue == nil {
			return "", errors.New("no PCIe root")
		}
		return *a.Value.StringValue, nil
	}
}
