package dev

import (
	"context"
	"fmt"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// installDeviceClasses creates gpuplane's DeviceClasses (whole GPUs, every
// MIG device, each MIG profile the simulated GPUs offer) from the default
// device plugin config, so claims and extended resources can name them.
func (s *supervisor) installDeviceClasses(ctx context.Context, client kubernetes.Interface) error {
	cfg, err := configv1.Load(strings.NewReader(""), configv1.Options{})
	if err != nil {
		return err
	}
	classes, err := dra.DeviceClasses(cfg, dra.CommonMIGProfiles)
	if err != nil {
		return err
	}
	s.step("installing %d DeviceClasses of the DRA driver gpu.gpuplane.io", len(classes))
	for _, c := range classes {
		_, err := client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DeviceClass %s: %w", c.Name, err)
		}
	}
	return nil
}

// writeMIGDynamicProfile writes a profile file of the built-in profile with
// GPUs 0 and 1 in MIG mode and no MIG devices.
func writeMIGDynamicProfile(builtin, path string) (string, error) {
	p, err := sim.Builtin(builtin)
	if err != nil {
		return "", cliutil.Usagef("mig-dynamic needs a built-in profile: %w", err)
	}
	if len(p.GPUs) < 3 || p.GPUs[0].MIGTable == "" {
		return "", cliutil.Usagef("profile %s has no MIG-capable GPUs to put in MIG mode", builtin)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "name: %s-mig-dynamic\ngpus:\n", builtin)
	for i, g := range p.GPUs {
		fmt.Fprintf(&sb, "  - model: %s\n    numaNode: %d\n", g.Model, g.NUMANode)
		if i < 2 {
			sb.WriteString("    migEnabled: true\n")
		}
	}
	if len(p.Links) > 1 && len(p.Links[0]) > 1 {
		fmt.Fprintf(&sb, "topology:\n  nvlink: %d\n", p.Links[0][1].NVLinks)
	}
	writeFabric(&sb, p)
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		return "", fmt.Errorf("writing the profile: %w", err)
	}
	return path, nil
}

// writeFabric keeps a built-in profile's NVLink fabric in the profile file
// written from it, so that an NVL72 tray in MIG mode stays on its rack's
// fabric.
func writeFabric(sb *strings.Builder, p *sim.Profile) {
	if f := p.Fabric; f != nil {
		fmt.Fprintf(sb, "fabric:\n  clusterUUID: %s\n  cliqueID: %d\n  state: %s\n", f.ClusterUUID, f.CliqueID, f.State)
	}
}
