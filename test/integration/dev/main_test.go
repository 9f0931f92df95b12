// Package dev_test runs `gpuplane dev up|down|status` as a user would, from
// a built binary, against real control-plane components: the end-to-end
// tier.
package dev_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	// binDir holds gpuplane, gpuplane-agent and gpuplane-scheduler built
	// for the run.
	binDir string
	// cpBinDir holds the control-plane binaries.
	cpBinDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dev-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	for _, name := range []string{"gpuplane", "gpuplane-agent", "gpuplane-scheduler"} {
		if _, err := framework.BuildCommand(context.Background(), dir, name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if cpBinDir, err = localcluster.ResolveBinDir(""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
