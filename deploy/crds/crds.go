// Package crds carries gpuplane's CustomResourceDefinitions (Queue and
// PodGroup, generated from api/scheduling by `make generate`) inside the
// binaries, so a tool can install them without a checkout beside it.
//
// It holds the manifests only; it must not hand-edit or generate them.
package crds

import "embed"

// Files are the CRD manifests, one YAML file each.
//
//go:embed *.yaml
var Files embed.FS
