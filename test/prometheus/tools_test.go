package prometheus_test

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"
)

// tool returns the path of a Prometheus binary, skipping the test when it
// is not installed.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not on PATH: install Debian's prometheus package (apt-get install -y prometheus) or run make test-monitoring", name)
	}
	return path
}

// run runs a command with a deadline and returns its combined output and
// exit code.
func run(t *testing.T, stdin []byte, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var exitErr *exec.ExitError
		if !asExitError(err, &exitErr) {
			t.Fatalf("running %s: %v", name, err)
		}
		code = exitErr.ExitCode()
	}
	return string(out), code
}
