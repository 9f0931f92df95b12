package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gpuplane/gpuplane/internal/apifeatures"
)

// Supported Kubernetes minors: the three newest and the one before them.
const (
	oldestMinor = 34
	newestMinor = 37
)

// cluster reports the cluster's Kubernetes version against the supported
// range, and for each optional API gpuplane uses whether it is served
// and, where it is not, what gpuplane turns off and how to turn it on.
func (d *doctor) cluster() (*Report, error) {
	disc := d.client.Discovery()
	r := &Report{Kind: "cluster"}
	info, err := disc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	r.Name = info.GitVersion
	r.add(versionCheck(info.GitVersion, info.Minor))
	served, err := apifeatures.Discover(disc, apifeatures.All()...)
	if err != nil {
		return nil, err
	}
	var off []string
	for _, f := range apifeatures.All() {
		if res, ok := served.Resource(f); ok {
			r.add(f.Name, OK, "served at "+res.GroupVersion().String(), "")
			continue
		}
		off = append(off, f.Name)
		r.add(f.Name, Warn, "not served, so off: "+f.Off, "served by "+f.ServedBy)
	}
	switch {
	case r.Failed():
		r.Summary = "this Kubernetes version is not supported"
	case len(off) > 0:
		r.Summary = "off on this cluster: " + strings.Join(off, ", ")
	default:
		r.Summary = "every optional API gpuplane uses is served"
	}
	return r, nil
}

// versionCheck compares the API server's version with the supported
// range; minor is discovery's minor, which some distributions suffix
// ("34+").
func versionCheck(gitVersion, minor string) (name, result, detail, fix string) {
	name = "kubernetes version"
	m, err := strconv.Atoi(strings.TrimRight(minor, "+"))
	if err != nil {
		if v, perr := version.ParseGeneric(gitVersion); perr == nil {
			m, err = int(v.Minor()), nil
		}
	}
	supported := fmt.Sprintf("gpuplane supports Kubernetes 1.%d to 1.%d", oldestMinor, newestMinor)
	switch {
	case err != nil:
		return name, Warn, fmt.Sprintf("%s: its minor version %q cannot be read; %s", gitVersion, minor, supported), ""
	case m < oldestMinor:
		return name, Fail, fmt.Sprintf("%s is older than 1.%d: %s (DRA at resource.k8s.io/v1, the chart's kubeVersion)", gitVersion, oldestMinor, supported),
			fmt.Sprintf("upgrade the cluster to Kubernetes 1.%d or later", oldestMinor)
	case m > newestMinor:
		return name, Warn, fmt.Sprintf("%s is newer than gpuplane was tested on: %s", gitVersion, supported), ""
	}
	return name, OK, fmt.Sprintf("%s: %s", gitVersion, supported), ""
}
