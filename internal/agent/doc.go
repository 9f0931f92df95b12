// Package agent builds the gpuplane-agent command: flags become a config,
// the config builds the node's parts (GPU backend, device plugin, health,
// labels, metrics), and this package connects them. It holds wiring only;
// each part lives in its own package.
package agent
