package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// ClaimVendor and ClaimClass make the CDI kind of the devices the DRA driver
// prepares for ResourceClaims: one spec per claim, its devices named
// <claim UID>-<device>, so that a name is never reused across claims and a
// runtime's cached spec cannot answer for a newer claim.
const (
	ClaimVendor = "gpu.gpuplane.io"
	ClaimClass  = "claim"
)

// ClaimDevice is one device of a claim's spec.
type ClaimDevice struct {
	// Name is the device's name in the DRA pool ("gpu-0").
	Name string
	// UUID is the GPU's or MIG device's UUID, given to the container as
	// NVIDIA_VISIBLE_DEVICES.
	UUID string
	// Paths are the device nodes (/dev/nvidia0, MIG capability nodes).
	Paths []string
}

// ClaimSpec is a claim's devices and the environment all of its
// containers get (sharing limits).
type ClaimSpec struct {
	// UID is the claim's UID.
	UID     string
	Devices []ClaimDevice
	// Env is added to every container that uses a device of the claim.
	Env []string
	// MPSPipeDir, when set, is mounted and named in
	// CUDA_MPS_PIPE_DIRECTORY; MPSLogDir likewise in
	// CUDA_MPS_LOG_DIRECTORY.
	MPSPipeDir string
	MPSLogDir  string
}

// ClaimDeviceID is the qualified CDI name of a claim's device.
func ClaimDeviceID(claimUID, device string) string {
	return parser.QualifiedName(ClaimVendor, ClaimClass, claimUID+"-"+device)
}

// ClaimSpecPath is where a claim's spec is in dir.
func ClaimSpecPath(dir, claimUID string) string {
	return filepath.Join(dir, specPrefix+"claim_"+claimUID+".yaml")
}

// WriteClaim writes the spec of one claim, validated and atomically, and
// returns its path.
func (w *Writer) WriteClaim(c ClaimSpec) (string, error) {
	if c.UID == "" || strings.ContainsAny(c.UID, "/\\") || len(c.Devices) == 0 {
		return "", errors.New("CDI spec of a claim: a UID without slashes and at least one device are required")
	}
	uuids := make([]string, len(c.Devices))
	for i, d := range c.Devices {
		uuids[i] = d.UUID
	}
	spec := &specs.Spec{
		Kind: ClaimVendor + "/" + ClaimClass,
		ContainerEdits: specs.ContainerEdits{
			Env: append([]string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}, c.Env...),
			DeviceNodes: []*specs.DeviceNode{
				w.node("/dev/nvidiactl"), w.node("/dev/nvidia-uvm"), w.node("/dev/nvidia-uvm-tools"),
			},
		},
	}
	if c.MPSPipeDir != "" {
		spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, "CUDA_MPS_PIPE_DIRECTORY="+c.MPSPipeDir)
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &specs.Mount{
			HostPath: c.MPSPipeDir, ContainerPath: c.MPSPipeDir, Options: []string{"rw", "nosuid", "nodev", "bind"},
		})
	}
	if c.MPSLogDir != "" {
		spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, "CUDA_MPS_LOG_DIRECTORY="+c.MPSLogDir)
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &specs.Mount{
			HostPath: c.MPSLogDir, ContainerPath: c.MPSLogDir, Options: []string{"rw", "nosuid", "nodev", "bind"},
		})
	}
	for _, d := range c.Devices {
		edits := specs.ContainerEdits{}
		for _, p := range d.Paths {
			edits.DeviceNodes = append(edits.DeviceNodes, w.node(p))
		}
		spec.Devices = append(spec.Devices, specs.Device{Name: c.UID + "-" + d.Name, ContainerEdits: edits})
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("computing the CDI version of claim %s's spec: %w", c.UID, err)
	}
	spec.Version = v
	path := ClaimSpecPath(w.dir, c.UID)
	if err := w.writeFile(path, "claim "+c.UID, spec); err != nil {
		return "", err
	}
	return path, nil
}

// RemoveClaim deletes a claim's spec, if any.
func (w *Writer) RemoveClaim(claimUID string) error {
	if err := os.Remove(ClaimSpecPath(w.dir, claimUID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// ClaimSpecUIDs lists the UIDs of the claims whose specs are in the
// directory.
func (w *Writer) ClaimSpecUIDs() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("listing the CDI specs of claims in %s: %w", w.dir, err)
	}
	var out []string
	for _, e := range entries {
		if uid, ok := strings.CutPrefix(e.Name(), specPrefix+"claim_"); ok {
			if uid, ok := strings.CutSuffix(uid, ".yaml"); ok && uid != "" {
				out = append(out, uid)
			}
		}
	}
	return out, nil
}
