package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// hostRefresh is how often the GPUs are listed again for the checks that
// read their state (MIG modes): an NVML query per GPU.
const hostRefresh = 30 * time.Second

// hostChecks are the node's checks beyond the agent's own parts: the GPUs'
// device nodes are in the agent's container (the container runtime is set
// up for NVIDIA), no GPU waits for a reset to change its MIG mode, and the
// CDI spec of every registered resource is written.
type hostChecks struct {
	backend gpu.Backend
	// devRoot is where /dev is seen; empty skips the device-node check
	// (simulated GPUs have none).
	devRoot string
	// cdiDir is --cdi-dir; empty skips the CDI check.
	cdiDir string
	now    func() time.Time

	mu      sync.Mutex
	devices []gpu.Device
	at      time.Time
}

func newHostChecks(b gpu.Backend, devices []gpu.Device, devRoot, cdiDir string) *hostChecks {
	return &hostChecks{backend: b, devRoot: devRoot, cdiDir: cdiDir, now: time.Now, devices: devices, at: time.Now()}
}

// gpus returns the GPUs, listed again every hostRefresh.
func (h *hostChecks) gpus() []gpu.Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.now().Sub(h.at) >= hostRefresh {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if ds, err := h.backend.Devices(ctx); err == nil {
			h.devices = ds
		}
		cancel()
		h.at = h.now()
	}
	return h.devices
}

// check returns the first failing check, or nil. registered are the
// resources the device plugin serves.
func (h *hostChecks) check(registered []string) *nodeCondition {
	if h == nil {
		return nil
	}
	devices := h.gpus()
	if h.devRoot != "" {
		var missing []string
		paths := []string{"/dev/nvidiactl"}
		for i := range devices {
			paths = append(paths, devices[i].Path())
		}
		for _, p := range paths {
			if _, err := os.Stat(filepath.Join(h.devRoot, p)); err != nil {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			return &nodeCondition{corev1.ConditionFalse, gpunode.ReasonDeviceNodesMissing,
				fmt.Sprintf("the GPUs' device nodes %s are not in the agent's container. Fix: make the NVIDIA Container Toolkit the node's container runtime (or set the chart's runtimeClassName), so NVIDIA_VISIBLE_DEVICES=all hands the agent every GPU", strings.Join(missing, ", "))}
		}
	}
	var pending []string
	for i := range devices {
		if m := devices[i].MIG; m.Capable && m.Current != m.Pending {
			pending = append(pending, fmt.Sprintf("GPU %d (MIG %s, %s after a reset)", devices[i].Index, onOff(m.Current), onOff(m.Pending)))
		}
	}
	if len(pending) > 0 {
		return &nodeCondition{corev1.ConditionFalse, gpunode.ReasonMIGModeChangePending,
			fmt.Sprintf("%s: the MIG mode change waits for a GPU reset, so the GPUs offered may not be the ones that run. Fix: drain the node, then `nvidia-smi -r` the GPUs or reboot", strings.Join(pending, ", "))}
	}
	if h.cdiDir != "" {
		var missing []string
		for _, r := range registered {
			if _, err := os.Stat(cdi.SpecPath(h.cdiDir, r)); err != nil {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return &nodeCondition{corev1.ConditionFalse, gpunode.ReasonCDISpecsMissing,
				fmt.Sprintf("no CDI spec in %s for %s, so a CDI-enabled runtime cannot resolve their devices. Fix: mount the host's CDI directory (/var/run/cdi) writable into the agent; the agent's log says why a write failed", h.cdiDir, strings.Join(missing, ", "))}
		}
	}
	return nil
}
