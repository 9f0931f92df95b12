// Command gpuplane-agent is gpuplane's node agent: it runs on every GPU node
// as a DaemonSet and serves the kubelet device plugin, health checking, CDI
// specs, feature labels and metrics over one view of the node's GPUs.
package main

import (
	"os"

	"github.com/gpuplane/gpuplane/internal/agent"
)

func main() {
	os.Exit(agent.Main(os.Args[1:], os.Stdout, os.Stderr))
}
