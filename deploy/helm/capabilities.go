package helmchart

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chartutil"
)

// ManifestKubeVersion is the Kubernetes release the manifests in deploy/
// are rendered for: the chart's defaults as they render without a cluster
// (`helm template --kube-version`), where MutatingAdmissionPolicy is GA.
// Against a cluster the chart renders by what it serves (templates/_capabilities.tpl).
var ManifestKubeVersion = chartutil.KubeVersion{Version: "v1.36.0", Major: "1", Minor: "36"}

// ManifestCapabilities are the capabilities Render renders with: Helm's
// offline API versions and ManifestKubeVersion.
func ManifestCapabilities() *chartutil.Capabilities {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = ManifestKubeVersion
	return caps
}

// ServedCapabilities are the capabilities of a cluster of Kubernetes
// version that serves exactly apis (each "group/version" and
// "group/version/Kind", as Helm reads them from discovery), for tests of
// what the chart renders on a given cluster without one.
func ServedCapabilities(version string, apis ...string) (*chartutil.Capabilities, error) {
	kv, err := chartutil.ParseKubeVersion(version)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q: %w", version, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	caps.APIVersions = chartutil.VersionSet(apis)
	return caps, nil
}
