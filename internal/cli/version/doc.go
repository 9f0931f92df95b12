// Package version is the `gpuplane version` command: the CLI's own build
// and, given a cluster, the builds of gpuplane-scheduler (its leader
// Lease's annotation) and of gpuplane-agent on each node (the Node's
// annotation), as api/buildinfo defines them. What it reads from the
// cluster is untrusted: a value that fails to parse is reported as such,
// never printed as a version.
package version
