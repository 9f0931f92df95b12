// Package dev implements `gpuplane dev up|down|status`: a local cluster
// with a real control plane (etcd, kube-apiserver, kube-controller-manager,
// a scheduler, kwok), simulated GPU nodes that run the real gpuplane-agent
// (internal/nodesim) with its DRA driver unless --dra=false (and gpuplane's
// DeviceClasses), and optionally many kwok GPU nodes.
//
// `up` re-executes the binary as a hidden `dev serve` supervisor in its own
// session, which owns every process of the cluster; the state directory
// holds its pid file, the resolved spec, progress, logs and the kubeconfig.
// `down` signals the supervisor and waits until it and every process it
// recorded are gone, then removes the state.
//
// It must not leave processes behind, start a second cluster over a running
// one, or touch any cluster other than the one it started.
package dev
