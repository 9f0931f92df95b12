// Command gpuplane is the gpuplane CLI: simulate scheduling on traces, run a
// local cluster, and look at a cluster's GPUs. Installed as kubectl-gpuplane
// it is also a kubectl plugin.
package main

import (
	"os"

	"github.com/gpuplane/gpuplane/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
