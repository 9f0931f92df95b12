package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildCommand compiles gpuplane's command name (gpuplane, gpuplane-agent,
// gpuplane-scheduler) from this checkout into dir and returns the binary's
// path, so tests run the binaries as users do. The build's output is part
// of the error.
func BuildCommand(ctx context.Context, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/gpuplane/gpuplane/cmd/"+name)
	// go-nvml's cgo preamble declares deprecated NVML calls; their warnings
	// are noise in a test log.
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, out)
	}
	return bin, nil
}
