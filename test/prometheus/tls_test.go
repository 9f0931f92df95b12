package prometheus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
)

// TestPrometheusScrapesOverTLSWithAuth serves the exporter with a web
// config (TLS and a basic-auth user, node_exporter's format) and has a real
// Prometheus scrape it with the CA and the password; plain HTTP and
// requests without the password are refused.
func TestPrometheusScrapesOverTLSWithAuth(t *testing.T) {
	tool(t, "prometheus")
	dir := t.TempDir()
	caFile := writeCerts(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, fmt.Appendf(nil, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: %s\n", hash), 0o600); err != nil {
		t.Fatal(err)
	}

	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	e, err := metrics.NewExporter(metrics.Options{GPUs: n.Backend, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h, err := metrics.NewHandler(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- metrics.ServeWeb(ctx, "127.0.0.1:0", webConfig, h, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { addrc <- a.String() })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("metrics server did not start: %v", err)
	}

	pool := x509.NewCertPool()
	b, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(b)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	get := func(url string, auth bool) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		if auth {
			req.SetBasicAuth("prometheus", "s3cret")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get("http://"+addr+"/metrics", true); err == nil && code == http.StatusOK {
		t.Error("plain HTTP served the metrics")
	}
	if code, err := get("https://"+addr+"/metrics", false); err != nil || code != http.StatusUnauthorized {
		t.Errorf("HTTPS without the password: %d %v, want 401", code, err)
	}
	if code, err := get("https://"+addr+"/metrics", true); err != nil || code != http.StatusOK {
		t.Errorf("HTTPS with the password: %d %v, want 200", code, err)
	}

	prom := startPrometheusJob(t, fmt.Sprintf(`    scheme: https
    tls_config:
      ca_file: %s
    basic_auth:
      username: prometheus
      password: s3cret
    static_configs:
      - targets: [%q]
`, caFile, addr))
	prom.eventually(t, "scrape over TLS with auth", `up{job="gpuplane"} == 1`, count(1))
	prom.eventually(t, "GPU series over TLS", `DCGM_FI_DEV_GPU_UTIL`, count(8))
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 signed by
// it (server.crt, server.key) to dir and returns the CA's file.
func writeCerts(t *testing.T, dir string) string {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey, srvKey := key(), key()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuplane test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "gpuplane-agent"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write("server.crt", "CERTIFICATE", srvDER)
	write("server.key", "EC PRIVATE KEY", keyDER)
	return write("ca.crt", "CERTIFICATE", caDER)
}

// TestWebConfigMistakes checks that a broken web config stops the server
// before it listens, naming the file.
func TestWebConfigMistakes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := metrics.ServeWeb(context.Background(), "127.0.0.1:0", bad, http.NotFoundHandler(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--web-config-file") {
		t.Errorf("ServeWeb with a missing certificate: %v, want an error naming %s and the flag", err, bad)
	}
}
