// Package ui_test drives `gpuplane ui` in a real browser: Debian's
// Chromium, headless, through the DevTools protocol (chromedp), against a
// dev cluster of simulated GPU nodes (`gpuplane dev up`) with
// gpuplane-scheduler. It checks what a user sees: every view loads without
// a console error, the GPU map names who holds each GPU, a waiting gang
// shows the scheduler's reason and the core's what-if, and a change in the
// cluster reaches the page within the bound the web view promises.
package ui_test

import (
	"context"
	"flag"
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
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("skipping the browser tests: -short")
		return 0
	}
	dir, err := os.MkdirTemp("", "ui-bin-")
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
