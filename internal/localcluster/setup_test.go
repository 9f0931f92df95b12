package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestCertificates(t *testing.T) {
	ca, err := newCertificateAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.certPEM)
	serving, err := ca.issueServing("kube-apiserver", []string{"kubernetes.default.svc"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.issueClient("alice", []string{"team-a", "system:authenticated"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		pair   keyPair
		usage  x509.ExtKeyUsage
		host   string
		wantCN string
		wantO  []string
	}{
		{name: "serving by IP", pair: serving, usage: x509.ExtKeyUsageServerAuth, host: "127.0.0.1", wantCN: "kube-apiserver"},
		{name: "serving by service name", pair: serving, usage: x509.ExtKeyUsageServerAuth, host: "kubernetes.default.svc", wantCN: "kube-apiserver"},
		{name: "client with groups", pair: client, usage: x509.ExtKeyUsageClientAuth, wantCN: "alice", wantO: []string{"team-a", "system:authenticated"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tls.X509KeyPair(tc.pair.CertPEM, tc.pair.KeyPEM); err != nil {
				t.Fatalf("certificate and key do not match: %v", err)
			}
			block, _ := pem.Decode(tc.pair.CertPEM)
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
				t.Fatalf("certificate does not verify against the CA: %v", err)
			}
			if cert.Subject.CommonName != tc.wantCN || strings.Join(cert.Subject.Organization, ",") != strings.Join(tc.wantO, ",") {
				t.Errorf("subject CN=%q O=%v, want CN=%q O=%v", cert.Subject.CommonName, cert.Subject.Organization, tc.wantCN, tc.wantO)
			}
		})
	}
}

func TestServiceAccountKey(t *testing.T) {
	priv, pub, err := newServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(priv)
	key, err := x509.ParseECPrivateKey(pb.Bytes)
	if err != nil {
		t.Fatalf("private key: %v", err)
	}
	ub, _ := pem.Decode(pub)
	pk, err := x509.ParsePKIXPublicKey(ub.Bytes)
	if err != nil {
		t.Fatalf("public key: %v", err)
	}
	if !key.PublicKey.Equal(pk) {
		t.Fatal("public key does not belong to the private key")
	}
}

func TestWriteKubeconfig(t *testing.T) {
	ca, err := newCertificateAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.issueClient("system:kube-scheduler", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeKubeconfig(path, "https://127.0.0.1:6443", ca.certPEM, "system:kube-scheduler", kp); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig does not load: %v", err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != string(ca.certPEM) || string(cfg.CertData) != string(kp.CertPEM) {
		t.Errorf("kubeconfig round trip lost data: host %q", cfg.Host)
	}
}

func TestRequireBinaries(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, dir, BinEtcd, "true")
	if err := os.WriteFile(filepath.Join(dir, BinKubeAPIServer), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		bins        []string
		wantMissing string
	}{
		{name: "present and executable", bins: []string{BinEtcd}},
		{name: "not executable", bins: []string{BinEtcd, BinKubeAPIServer}, wantMissing: BinKubeAPIServer},
		{name: "absent", bins: []string{BinKwok, BinEtcd}, wantMissing: BinKwok},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			paths, err := requireBinaries(dir, tc.bins...)
			if tc.wantMissing == "" {
				if err != nil {
					t.Fatal(err)
				}
				if paths[BinEtcd] != filepath.Join(dir, BinEtcd) {
					t.Errorf("path of etcd = %q", paths[BinEtcd])
				}
				return
			}
			if !errors.Is(err, ErrBinaryMissing) {
				t.Fatalf("error %v is not ErrBinaryMissing", err)
			}
			for _, want := range []string{tc.wantMissing, "make controlplane-bins", dir} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestResolveBinDir(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module "+productModule+"\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(root, "test", "integration")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(nested)
	tests := []struct {
		name     string
		explicit string
		env      string
		want     string
	}{
		{name: "explicit wins", explicit: "/opt/cp", env: "/env/cp", want: "/opt/cp"},
		{name: "environment next", env: "/env/cp", want: "/env/cp"},
		{name: "checkout's bin last", want: filepath.Join(root, "bin")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(BinDirEnv, tc.env)
			got, err := ResolveBinDir(tc.explicit)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ResolveBinDir = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	free, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		port    int
		wantErr bool
	}{
		{name: "taken", port: taken, wantErr: true},
		{name: "free", port: free},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPortFree(tc.port, "kube-apiserver")
			if tc.wantErr != (err != nil) {
				t.Fatalf("checkPortFree(%d) = %v, want error %v", tc.port, err, tc.wantErr)
			}
			if tc.wantErr && (!errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(tc.port))) {
				t.Errorf("error %q should be ErrPortInUse and name port %d", err, tc.port)
			}
		})
	}
}

func TestWriteKwokConfig(t *testing.T) {
	stages := t.TempDir()
	if err := os.MkdirAll(filepath.Join(stages, "node", "fast"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stages, "node", "fast", "a.yaml"), []byte("kind: Stage\nmetadata:\n  name: a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stages, "b.yaml"), []byte("kind: Stage\nmetadata:\n  name: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		stages  []string
		want    string
		wantErr string
	}{
		{name: "concatenated as documents", stages: []string{"node/fast/a.yaml", "b.yaml"},
			want: "---\n" + kwokOptions + "---\nkind: Stage\nmetadata:\n  name: a\n---\nkind: Stage\nmetadata:\n  name: b\n"},
		{name: "missing stage", stages: []string{"pod/none.yaml"}, wantErr: "make controlplane-bins"},
		{name: "escaping the directory", stages: []string{"../etc/passwd"}, wantErr: "inside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "kwok.yaml")
			err := writeKwokConfig(out, stages, tc.stages)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("config:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero value", cfg: Config{}},
		{name: "port out of range", cfg: Config{APIServerPort: 70000}, wantErr: "APIServerPort"},
		{name: "negative qps", cfg: Config{ComponentQPS: -1}, wantErr: "ComponentQPS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.withDefaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.StartTimeout <= 0 || got.StopGrace <= 0 || got.Logger == nil || len(got.KwokStages) == 0 || got.ComponentQPS <= 0 {
				t.Errorf("defaults not applied: %+v", got)
			}
		})
	}
}
