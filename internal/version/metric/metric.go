// Package metric exports a binary's build as the gpuplane_build_info gauge,
// for gpuplane-agent's and gpuplane-scheduler's /metrics. It is apart from
// package version so that the CLI, which serves no metrics, does not link
// Prometheus' client.
package metric

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

// Name is the gauge's name.
const Name = "gpuplane_build_info"

// New returns a gauge, always 1, whose labels carry the build: version,
// commit, date, go_version, kubernetes_client and platform (as Prometheus'
// own *_build_info gauges do, to join on in queries).
func New(i buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: Name,
		Help: "The running gpuplane build; always 1. Labels: version, commit, date, go_version, kubernetes_client, platform.",
		ConstLabels: prometheus.Labels{
			"version": i.Version, "commit": i.Commit, "date": i.Date,
			"go_version": i.GoVersion, "kubernetes_client": i.KubernetesClient, "platform": i.Platform,
		},
	})
	g.Set(1)
	return g
}
