// Package custommetrics serves the GPU use of each pod, as gpuplane-agent
// measures it, through the Kubernetes custom metrics API
// (custom.metrics.k8s.io/v1beta2), so that a HorizontalPodAutoscaler scales
// on GPU utilisation or memory with no Prometheus and no adapter in
// between.
//
// A Scraper reads the agents' /metrics (the endpoints of their metrics
// Service) at an interval and keeps, per pod, the latest
// gpuplane_pod_gpu_utilization_ratio and gpuplane_pod_gpu_memory_used_bytes;
// a Server answers the API's discovery and its per-pod reads from that,
// behind kube-apiserver's aggregation layer: it trusts the front proxy's
// client certificate and identity headers as kube-apiserver publishes them,
// and asks kube-apiserver (SubjectAccessReview) whether the caller may read
// the metric.
//
// It measures nothing itself: the agent measures, this package only
// serves. It must not write to the cluster, and must not serve a value
// older than it was told to keep.
package custommetrics
