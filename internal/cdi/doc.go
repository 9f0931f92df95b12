// Package cdi writes a Container Device Interface spec for each device-plugin
// resource, so that container runtimes can inject the devices a container
// was allocated by CDI name (k8s.device-plugin.nvidia.com/gpu=<uuid>). Every
// spec is checked with the CDI project's own validation before it replaces
// the previous file, atomically. For the DRA driver it writes one spec per
// prepared ResourceClaim (gpu.gpuplane.io/claim=<claim UID>-<device>),
// removed when the claim is unprepared.
//
// It writes only under its configured directory and must not talk to the
// kubelet or the GPU backend.
package cdi
