package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLinks checks what each binary links as a plain `go build` builds
// it. The CLI must not link go-nvml: its cgo bindings leave NVML's symbols
// to be resolved at run time, which fails at start on a machine without the
// driver once anything makes the binary bind at start (Go's "plugin"
// package does, through Helm's SDK and kustomize). The agent needs go-nvml
// and so must not link "plugin"; the scheduler links neither.
func TestLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, tc := range []struct {
		cmd    string
		forbid []string
	}{
		{"github.com/gpuplane/gpuplane/cmd/gpuplane", []string{"github.com/NVIDIA/go-nvml/"}},
		{"github.com/gpuplane/gpuplane/cmd/gpuplane-agent", []string{"plugin"}},
		{"github.com/gpuplane/gpuplane/cmd/gpuplane-scheduler", []string{"plugin", "github.com/NVIDIA/go-nvml/"}},
	} {
		t.Run(tc.cmd[strings.LastIndex(tc.cmd, "/")+1:], func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", tc.cmd)
			cmd.Env = append(os.Environ(), "GOFLAGS=")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tc.cmd, err)
			}
			for _, dep := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				for _, f := range tc.forbid {
					if dep == f || strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
						t.Errorf("%s links %s", tc.cmd, dep)
					}
				}
			}
		})
	}
}
