// Package helmchart carries gpuplane's Helm chart (deploy/helm/gpuplane)
// inside the binaries, so that `gpuplane dev up --install chart` and the
// tests install the very chart users install, and renders it.
//
// The chart is the one source of gpuplane's Kubernetes objects: the
// manifests in deploy/agent, deploy/scheduler and deploy/admission are the
// chart rendered with its default values (TestManifestsAreRendered keeps
// them so). It holds the chart and rendering only; it must not talk to a
// cluster but through Helm's own actions (ActionConfig).
package helmchart

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// files is the chart directory; all: keeps .helmignore.
//
//go:embed all:gpuplane
var files embed.FS

// Name is the chart's name and directory.
const Name = "gpuplane"

// DefaultNamespace is where the README installs gpuplane and where the
// rendered manifests in deploy/ put it.
const DefaultNamespace = "gpuplane-system"

// MIGConfigMap is the name of the ConfigMap of mig-parted's default
// configs the chart deploys (agent.mig), and MIGConfigKey its key.
const (
	MIGConfigMap = "default-mig-parted-config"
	MIGConfigKey = "config.yaml"
)

// MIGPartedConfig returns the mig-parted config the chart's MIG ConfigMap
// holds, for a cluster that runs the agent without the chart (gpuplane dev
// up).
func MIGPartedConfig() ([]byte, error) {
	return files.ReadFile(Name + "/files/mig-parted-config-default.yaml")
}

// Load returns the embedded chart.
func Load() (*chart.Chart, error) {
	return LoadFS(files, Name)
}

// LoadFS loads the chart in directory dir of fsys (tests load modified
// copies this way).
func LoadFS(fsys fs.FS, dir string) (*chart.Chart, error) {
	var bufs []*loader.BufferedFile
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		bufs = append(bufs, &loader.BufferedFile{Name: strings.TrimPrefix(p, dir+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the chart: %w", err)
	}
	c, err := loader.LoadFiles(bufs)
	if err != nil {
		return nil, fmt.Errorf("loading the chart: %w", err)
	}
	return c, nil
}

// Rendered is the chart's output: each template file's manifest by the
// file's path under templates/, without empty ones.
type Rendered map[string]string

// Render renders the chart with values over its defaults, as `helm
// template` does (the values checked against values.schema.json), for a
// release in namespace, on Kubernetes ManifestKubeVersion.
func Render(c *chart.Chart, values map[string]any, release, namespace string) (Rendered, error) {
	r, _, err := RenderFor(c, values, release, namespace, ManifestCapabilities())
	return r, err
}

// RenderFor renders the chart as Render does for a cluster with caps,
// and returns NOTES.txt beside the manifests.
func RenderFor(c *chart.Chart, values map[string]any, release, namespace string, caps *chartutil.Capabilities) (Rendered, string, error) {
	opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(c, values, opts, caps)
	if err != nil {
		return nil, "", fmt.Errorf("chart values: %w", err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		return nil, "", fmt.Errorf("rendering the chart: %w", err)
	}
	r := Rendered{}
	prefix := c.Name() + "/templates/"
	notes := out[prefix+"NOTES.txt"]
	for name, text := range out {
		if !strings.HasPrefix(name, prefix) || path.Ext(name) != ".yaml" {
			continue
		}
		if strings.TrimSpace(stripComments(text)) == "" {
			continue
		}
		r[strings.TrimPrefix(name, prefix)] = text
	}
	return r, notes, nil
}

// Manifest joins every rendered file into one multi-document YAML stream,
// in path order.
func (r Rendered) Manifest() string {
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(r)) {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(r[name]))
	}
	return b.String()
}

// CRDs returns the chart's CustomResourceDefinition files (crds/), which
// Helm installs before the templates and never upgrades; the scheduler
// upgrades them (internal/scheduler/crds).
func CRDs(c *chart.Chart) map[string][]byte {
	out := map[string][]byte{}
	for _, f := range c.CRDObjects() {
		out[path.Base(f.Filename)] = f.File.Data
	}
	return out
}

// stripComments drops full-line YAML comments, so a template that renders
// only its header comment counts as empty.
func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") || t == "---" {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// ActionConfig is Helm's action configuration for the cluster kubeconfig
// reaches, releases stored as Secrets in namespace, as the helm command
// keeps them.
func ActionConfig(kubeconfig, namespace string, debug func(format string, v ...any)) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &namespace
	cfg := new(action.Configuration)
	if debug == nil {
		debug = func(string, ...any) {}
	}
	if err := cfg.Init(flags, namespace, "secret", debug); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}
