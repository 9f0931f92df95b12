// Package nodesim_test runs simulated GPU nodes against a real control plane
// with the real gpuplane-agent as their device plugin: capacity from the
// agent's ListAndWatch, pods admitted through GetPreferredAllocation and
// Allocate, PodResources, time-slicing and MIG.
package nodesim_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuplane/gpuplane/internal/controlplane"
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
	agentBinary = filepath.Join(dir, "gpuplane-agent")
	build := exec.Command("go", "build", "-o", agentBinary, "github.com/gpuplane/gpuplane/cmd/gpuplane-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building gpuplane-agent: %v\n", err)
		return 1
	}
	return framework.Main(m, controlplane.Config{ControllerManager: true}, &env)
}
