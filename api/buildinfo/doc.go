// Package buildinfo is the contract for how gpuplane's binaries say which
// build they are: the Info every binary prints for --version, and the
// annotations through which the cluster reports the builds that run in it.
//
// gpuplane-agent writes AgentAnnotation on its own Node; the leading
// gpuplane-scheduler writes SchedulerAnnotation on its leader Lease.
// `gpuplane version` reads both. Their values are compact JSON of Info:
//
//	{"version":"v0.1.0","commit":"4f1c…","date":"2026-11-27T18:02:11Z","goVersion":"go1.26.0","kubernetesClient":"v0.36.3","platform":"linux/amd64"}
//
// What is read from the cluster is untrusted: Parse bounds the value's
// size, refuses fields outside a small character set and requires a
// version, and its errors name the annotation.
package buildinfo
