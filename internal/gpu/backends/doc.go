// Package backends chooses a node's GPU backend: the simulated node when
// --simulate names a profile, otherwise NVML, falling back to a node with no
// GPUs when NVML cannot start and the operator allows it. It holds the
// choice only; each backend lives in its own package.
package backends
