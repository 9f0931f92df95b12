// Package compat is the compatibility tier (make test-compat): gpuplane
// against the kube-apiserver of the oldest and the newest Kubernetes minor
// it supports (1.34 and 1.37, each built from its own tools/k8s-<minor>
// module), with etcd and kwok. Its tests check what differs between
// Kubernetes releases: the chart passes helm lint and a server-side dry
// run, installs, upgrades and uninstalls, rendered by what the API server
// serves; gpuplane-scheduler places a GPU pod and a gang on kwok nodes and
// allocates a ResourceClaim through DRA.
package compat
