package gpunode

import (
	"fmt"
	"strings"
)

// LabelGPUAPI on a Node says through which API gpuplane-agent serves the
// node's GPUs: GPUAPIDevicePlugin, GPUAPIDRA or GPUAPIBoth. It overrides
// the agent's --gpu-api on that node, so that a pool is moved from the
// device plugin to DRA by labelling its nodes. The agent follows it while
// it runs; a node moved off DRA keeps the driver until the claims
// prepared on it are unprepared.
const LabelGPUAPI = "gpuplane.io/gpu-api"

// GPUAPI is a value of LabelGPUAPI.
type GPUAPI string

// The APIs a node's GPUs are served through.
const (
	// GPUAPIBoth serves nvidia.com/gpu and MIG resources through the
	// device plugin and the same GPUs as the DRA driver, from one ledger.
	GPUAPIBoth GPUAPI = "both"
	// GPUAPIDRA serves the GPUs only as the DRA driver: the device plugin
	// advertises nothing, and pods asking for nvidia.com/gpu are served
	// through the DeviceClasses' extendedResourceName.
	GPUAPIDRA GPUAPI = "dra"
	// GPUAPIDevicePlugin serves the GPUs only through the device plugin.
	GPUAPIDevicePlugin GPUAPI = "device-plugin"
)

// ParseGPUAPI reads a LabelGPUAPI value. Surrounding space is ignored;
// anything else than the three values is an error naming the label.
func ParseGPUAPI(v string) (GPUAPI, error) {
	if len(v) > 63 {
		return "", fmt.Errorf("label %s: value of %d characters; want %s, %s or %s", LabelGPUAPI, len(v), GPUAPIDRA, GPUAPIDevicePlugin, GPUAPIBoth)
	}
	switch a := GPUAPI(strings.TrimSpace(v)); a {
	case GPUAPIBoth, GPUAPIDRA, GPUAPIDevicePlugin:
		return a, nil
	}
	return "", fmt.Errorf("label %s: %q is not an API; want %s, %s or %s", LabelGPUAPI, v, GPUAPIDRA, GPUAPIDevicePlugin, GPUAPIBoth)
}

// DevicePlugin reports whether the device plugin advertises the GPUs.
func (a GPUAPI) DevicePlugin() bool { return a != GPUAPIDRA }

// DRA reports whether the DRA driver serves the GPUs.
func (a GPUAPI) DRA() bool { return a != GPUAPIDevicePlugin }
