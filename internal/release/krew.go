package release

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// The krew plugin manifest (krew's index.krew.dev Plugin,
// krew.googlecontainertools.github.com/v1alpha2), the fields gpuplane
// fills.
type krewPlugin struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   krewMetadata `json:"metadata"`
	Spec       krewSpec     `json:"spec"`
}

type krewMetadata struct {
	Name string `json:"name"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	SHA256   string       `json:"sha256"`
	Files    []krewFile   `json:"files"`
	Bin      string       `json:"bin"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// KrewAPIVersion is the manifest's apiVersion.
const KrewAPIVersion = "krew.googlecontainertools.github.com/v1alpha2"

type archive struct {
	name, os, arch, sha256 string
}

// writeKrew writes the manifest at path: one platform per archive, at
// downloadURL/<archive>, installed as kubectl-gpuplane.
func writeKrew(path, version, downloadURL string, archives []archive) error {
	p := krewPlugin{APIVersion: KrewAPIVersion, Kind: "Plugin", Metadata: krewMetadata{Name: "gpuplane"},
		Spec: krewSpec{
			Version:          version,
			Homepage:         "https://github.com/gpuplane/gpuplane",
			ShortDescription: "GPU scheduling, sharing and health for Kubernetes clusters",
			Description: `gpuplane shows a cluster's NVIDIA GPUs, who holds them, queues and
waiting gangs (status), diagnoses nodes and pods (doctor), plans MIG
layouts, simulates scheduling policies on GPU traces (simulate) and brings
up a local cluster of simulated GPU nodes (dev up).
`,
		}}
	base := strings.TrimSuffix(downloadURL, "/")
	for _, a := range archives {
		files := []krewFile{{From: Commands[0], To: "."}}
		for _, f := range ArchiveFiles {
			files = append(files, krewFile{From: f, To: "."})
		}
		p.Spec.Platforms = append(p.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": a.os, "arch": a.arch}},
			URI:      base + "/" + a.name, SHA256: a.sha256, Files: files, Bin: Commands[0],
		})
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	return os.WriteFile(path, b, 0o644)
}
