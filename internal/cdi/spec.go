package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// Vendor is the CDI vendor of gpuplane's specs. It differs from the
// toolkit's nvidia.com so that both sets of specs can live side by side.
const Vendor = "k8s.device-plugin.nvidia.com"

// CDI classes.
const (
	ClassGPU = "gpu"
	ClassMIG = "mig"
)

// DefaultDir is where container runtimes look for dynamic CDI specs.
const DefaultDir = "/var/run/cdi"

// specPrefix starts the name of every spec file this package writes.
const specPrefix = "gpuplane_"

// Options configure a Writer.
type Options struct {
	// Dir is the CDI spec directory, DefaultDir when empty.
	Dir string
	// DevRoot is where the host's /dev is seen from the agent ("/" on the
	// host, "/run/nvidia/driver" with a containerized driver).
	DevRoot string
	// MPSRoot holds the MPS pipe directories (one per resource).
	MPSRoot string
}

// Writer writes and removes resource specs.
type Writer struct {
	dir, devRoot, mpsRoot string
}

// NewWriter returns a Writer; it creates the directory when missing.
func NewWriter(o Options) (*Writer, error) {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.DevRoot == "" {
		o.DevRoot = "/"
	}
	if o.MPSRoot == "" {
		o.MPSRoot = configv1.DefaultMPSRoot
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating CDI spec directory %s: %w", o.Dir, err)
	}
	return &Writer{dir: o.Dir, devRoot: o.DevRoot, mpsRoot: o.MPSRoot}, nil
}

// Class is the CDI class of a resource's devices.
func Class(r *sharing.Resource) string {
	if r.HasMIG() {
		return ClassMIG
	}
	return ClassGPU
}

// Kind is the CDI kind of a resource's devices.
func Kind(r *sharing.Resource) string { return Vendor + "/" + Class(r) }

// DeviceName is a device's CDI name under the device-ID strategy ("uuid" or
// "index"). Replicas share their GPU's name.
func DeviceName(d *sharing.Device, idStrategy string) string {
	if idStrategy == configv1.DeviceIDStrategyIndex {
		return d.Index
	}
	return d.UUID
}

// QualifiedName is a device's fully qualified CDI name.
func QualifiedName(r *sharing.Resource, d *sharing.Device, idStrategy string) string {
	return parser.QualifiedName(Vendor, Class(r), DeviceName(d, idStrategy))
}

// MPSPipeDir is the MPS pipe directory of a sharing.
func MPSPipeDir(mpsRoot string, r *sharing.Resource) string {
	return filepath.Join(mpsRoot, r.ShortName(), "pipe")
}

// Path is the file the spec of r is written to.
func (w *Writer) Path(r *sharing.Resource) string {
	return SpecPath(w.dir, r.Name)
}

// SpecPath is where the spec of the resource named resource is in dir.
func SpecPath(dir, resource string) string {
	return filepath.Join(dir, specPrefix+strings.ReplaceAll(resource, "/", "-")+".yaml")
}

// Spec builds the CDI spec of a resource: one device per GPU or MIG device
// under both its UUID and index, the control nodes common to all.
func (w *Writer) Spec(r *sharing.Resource) (*specs.Spec, error) {
	spec := &specs.Spec{
		Kind: Kind(r),
		ContainerEdits: specs.ContainerEdits{
			Env: []string{"NVIDIA_VISIBLE_DEVICES=void"},
			DeviceNodes: []*specs.DeviceNode{
				w.node("/dev/nvidiactl"), w.node("/dev/nvidia-uvm"), w.node("/dev/nvidia-uvm-tools"),
			},
		},
	}
	seen := map[string]bool{}
	mps := false
	for i := range r.Devices {
		d := &r.Devices[i]
		mps = mps || d.Sharing == sharing.SharingMPS
		if seen[d.UUID] {
			continue
		}
		seen[d.UUID] = true
		edits := specs.ContainerEdits{}
		for _, p := range d.Paths {
			edits.DeviceNodes = append(edits.DeviceNodes, w.node(p))
		}
		for _, name := range []string{d.UUID, d.Index} {
			spec.Devices = append(spec.Devices, specs.Device{Name: name, ContainerEdits: edits})
		}
	}
	if mps {
		pipe := MPSPipeDir(w.mpsRoot, r)
		spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, "CUDA_MPS_PIPE_DIRECTORY="+pipe)
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &specs.Mount{
			HostPath: pipe, ContainerPath: pipe, Options: []string{"rw", "nosuid", "nodev", "bind"},
		})
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("computing the CDI version of %s's spec: %w", r.Name, err)
	}
	spec.Version = v
	return spec, nil
}

func (w *Writer) node(p string) *specs.DeviceNode {
	return &specs.DeviceNode{Path: p, HostPath: filepath.Join(w.devRoot, p)}
}

// Write validates the spec of r with the CDI library and replaces its file
// atomically (write to a temporary file, then rename). A resource without
// devices has its file removed, since a CDI spec must have devices.
func (w *Writer) Write(r *sharing.Resource) (string, error) {
	path := w.Path(r)
	if len(r.Devices) == 0 {
		return path, w.Remove(r)
	}
	spec, err := w.Spec(r)
	if err != nil {
		return "", err
	}
	if err := w.writeFile(path, r.Name, spec); err != nil {
		return "", err
	}
	return path, nil
}

// writeFile validates spec with the CDI library and replaces path with it
// atomically (write to a temporary file, then rename).
func (w *Writer) writeFile(path, what string, spec *specs.Spec) error {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encoding the CDI spec of %s: %w", what, err)
	}
	tmp, err := os.CreateTemp(w.dir, ".tmp-"+specPrefix+"*.yaml")
	if err != nil {
		return fmt.Errorf("writing the CDI spec of %s: %w", what, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the CDI spec of %s to %s: %w", what, tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("syncing the CDI spec of %s: %w", what, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing the CDI spec of %s: %w", what, err)
	}
	if err := Validate(tmp.Name()); err != nil {
		return fmt.Errorf("the CDI spec built for %s is invalid: %w", what, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("setting the mode of the CDI spec of %s: %w", what, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing the CDI spec %s: %w", path, err)
	}
	return nil
}

// Remove deletes the spec file of r, if any.
func (w *Writer) Remove(r *sharing.Resource) error {
	if err := os.Remove(w.Path(r)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the CDI spec of %s: %w", r.Name, err)
	}
	return nil
}

// Validate reads a spec file back with the CDI library, which checks its
// version, names and container edits.
func Validate(path string) error {
	if _, err := cdiapi.ReadSpec(path, 0); err != nil {
		return err
	}
	return nil
}
