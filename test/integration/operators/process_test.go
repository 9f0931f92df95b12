package operators_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The operators localcluster.StartOperator has no recipe for yet
// (LeaderWorkerSet, Kubeflow Trainer) are started here as plain processes,
// their CRDs and webhooks set up by their tests.

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

// servingCert writes a self-signed certificate for 127.0.0.1 as tls.crt
// and tls.key into a new directory: an operator's webhook server will not
// start without one, though no webhook configuration points the API server
// at it.
func servingCert(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
