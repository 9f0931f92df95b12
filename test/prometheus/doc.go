// Package prometheus tests gpuplane's metrics and monitoring assets with
// the real Prometheus tools: promtool checks the alert rules, runs their
// unit tests and lints the golden /metrics output, and a Prometheus server
// scrapes an exporter backed by a simulated node while the tests query it
// with the PromQL of the alert rules and dashboards. One test scrapes the
// built gpuplane-agent itself, all its parts running.
//
// The tests install nothing. Without prometheus and promtool on PATH they
// skip and say so; `make test-monitoring` (hack/monitoring.mk) installs
// Debian's prometheus package in CI first.
package prometheus
