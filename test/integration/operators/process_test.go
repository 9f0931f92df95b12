package operators_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The Kubeflow Trainer, which localcluster.StartOperator has no recipe for
// (it reads its certificate from a fixed path its test fills from the
// Secret it writes), is started here as a plain process, its CRDs set up by
// its test.

// trainingCertDir is where the Kubeflow Trainer reads its webhook
// certificate (a fixed path; in a cluster the kubelet mounts its Secret
// there).
const trainingCertDir = "/tmp/k8s-webhook-server/serving-certs"

// operatorsDir is where `make operator-bins` puts the operators and their
// CRDs: bin/operators beside the control plane's binaries.
func operatorsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(env.ControlPlane.BinDir(), "operators")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("no operators at %s (run make operator-bins): %v", dir, err)
	}
	return dir
}

// startProcess runs an operator binary as a process for the test, with
// args, logging to the test's temporary directory.
func startProcess(t *testing.T, name string, args ...string) {
	t.Helper()
	bin := filepath.Join(operatorsDir(t), name)
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.ControlPlane.Kubeconfig(), "NAMESPACE=default", "POD_NAMESPACE=default")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("last lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
