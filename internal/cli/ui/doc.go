// Package ui implements `gpuplane ui`: the command that serves the web
// view of internal/ui on a loopback address, reading the cluster with the
// user's kubeconfig. It wires flags to the view's config and must not hold
// any view logic of its own; like every gpuplane read command it never
// writes to the cluster.
package ui
