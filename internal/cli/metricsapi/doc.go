// Package metricsapi is the `gpuplane metrics-api` command: the server of
// the custom metrics API (internal/custommetrics) as the Helm chart runs
// it, behind an APIService, so that HorizontalPodAutoscalers scale on the
// GPU use gpuplane-agent measures for each pod. It only wires flags to
// internal/custommetrics; it must not measure anything itself.
package metricsapi
