// Package admission carries gpuplane's admission policies (Kubernetes
// MutatingAdmissionPolicy, served by the API server itself from 1.36 on)
// inside the binaries, so that `gpuplane dev up` installs them without a
// checkout beside it.
//
// The policies translate pod specs written for other GPU schedulers into
// what the kubelet and gpuplane-scheduler need; they make no scheduling
// decision. It holds the manifests only.
package admission

import "embed"

// Files are the policy manifests, one YAML file each.
//
//go:embed *.yaml
var Files embed.FS
