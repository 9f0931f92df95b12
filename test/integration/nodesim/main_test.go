// Package nodesim_test runs simulated GPU nodes against a real control plane
// with the real gpuplane-agent as their device plugin: capacity from the
// agent's ListAndWatch, pods admitted through GetPreferredAllocation and
// Allocate, PodResources, time-slicing and MIG.
package nodesim_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env *framework.Env
	// agentBinary is gpuplane-agent built from this checkout for the run.
	agentBinary string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodesim-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if agentBinary, err = framework.BuildCommand(context.Background(), dir, "gpuplane-agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return framework.Main(m, localcluster.Config{ControllerManager: true}, &env)
}
