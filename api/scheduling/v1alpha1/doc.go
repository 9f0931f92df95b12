// Package v1alpha1 holds gpuplane's scheduling API, group
// scheduling.gpuplane.io: Queue (cluster-scoped) shares the cluster's
// resources among teams through guarantees, limits and weights; PodGroup
// (namespaced) makes a set of pods a gang that is placed whole or not at
// all. Pods join them with the labels scheduling.gpuplane.io/queue and
// scheduling.gpuplane.io/pod-group.
//
// This package holds API types and their validation markers only; the
// scheduler's behaviour lives in internal/scheduler.
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.gpuplane.io
package v1alpha1
