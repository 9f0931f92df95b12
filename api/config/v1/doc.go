// Package v1 is gpuplane-agent's device-plugin configuration, version v1.
//
// The file format is NVIDIA k8s-device-plugin's v1 format read as-is
// (version, flags, resources, sharing.timeSlicing, sharing.mps, imex), so
// existing ConfigMaps keep working, plus gpuplane's extensions:
//
//   - per-GPU sharing: several entries for one resource name with disjoint
//     `devices` and different `replicas`, and time-slicing and MPS side by
//     side on different GPUs of one node;
//   - sharing.allocationPolicy: "distributed" (default) or "packed", how
//     replicas and MIG devices are chosen for a request;
//   - health: probation time, extra ignored XIDs, switching checks off;
//   - health.quarantine: what a critical GPU fault leads to, per class of
//     XIDs (scope gpu or node, evict, reset), with the timeouts of each
//     step (DefaultQuarantineClasses follows NVIDIA's XID catalogue).
//
// One alias is accepted because users paste it from articles:
// sharing.mig.strategy means flags.migStrategy (Load logs a note).
//
// # Precedence
//
// Each setting is taken from, in order: a command-line flag, then an
// environment variable, then the config file, then the default. Overrides
// carries the first two; Load applies them over the file in one pass and
// then validates the result.
//
// Parsing is strict: an unknown version or field, or an invalid value, is an
// error naming the field, the value and what is allowed. This package only
// parses and validates; it must not touch GPUs, files or the network.
package v1
