// Package controlplane_test checks the launcher against the real binaries:
// what starts, what a caller gets wrong, and that nothing outlives Stop.
package localcluster_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

func TestEtcdAndAPIServerOnly(t *testing.T) {
	cp := framework.StartControlPlane(t, localcluster.Config{})
	tests := []struct {
		name       string
		kubeconfig string
	}{
		{name: "admin REST config"},
		{name: "admin kubeconfig file", kubeconfig: cp.Kubeconfig()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cp.RESTConfig()
			if tc.kubeconfig != "" {
				var err error
				if cfg, err = clientcmd.BuildConfigFromFlags("", tc.kubeconfig); err != nil {
					t.Fatal(err)
				}
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			v, err := client.Discovery().ServerVersion()
			if err != nil {
				t.Fatalf("server version: %v", err)
			}
			if !strings.HasPrefix(v.GitVersion, "v1.") {
				t.Errorf("server version %q is not a Kubernetes release", v.GitVersion)
			}
			if _, err := client.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{}); err != nil {
				t.Errorf("reading kube-system: %v", err)
			}
		})
	}
}

func TestRBACIsEnforced(t *testing.T) {
	cp := framework.StartControlPlane(t, localcluster.Config{})
	path, err := cp.UserKubeconfig("nobody")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	_, err = client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("a user without roles listed nodes (err %v); RBAC is not in force", err)
	}
}

func TestStartErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	empty := t.TempDir()
	tests := []struct {
		name    string
		cfg     localcluster.Config
		wantErr error
		wantMsg string
	}{
		{name: "port in use", cfg: localcluster.Config{APIServerPort: taken}, wantErr: localcluster.ErrPortInUse, wantMsg: "cannot be bound"},
		{name: "binaries missing", cfg: localcluster.Config{BinDir: empty}, wantErr: localcluster.ErrBinaryMissing, wantMsg: "make controlplane-bins"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.BinDir == "" {
				// The port is checked only once the binaries are found.
				framework.RequireBinaries(t, tc.cfg)
			}
			cp, err := localcluster.Start(t.Context(), tc.cfg)
			if err == nil {
				_ = cp.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Start error %q, want %v mentioning %q", err, tc.wantErr, tc.wantMsg)
			}
		})
	}
}

func TestStopLeavesNothingBehind(t *testing.T) {
	cp := framework.StartControlPlane(t, localcluster.DefaultConfig())
	dir := cp.Dir()
	pids := childPIDs(t)
	if len(pids) < 3 {
		t.Fatalf("expected etcd, kube-apiserver, kube-controller-manager and kwok among the children, found %d", len(pids))
	}
	if err := cp.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := childPIDs(t); len(left) != 0 {
		t.Errorf("processes still running after Stop: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s still exists after Stop (stat: %v)", dir, err)
	}
}

// childPIDs lists running (not zombie) processes whose parent is this test.
func childPIDs(t *testing.T) []string {
	t.Helper()
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[1] == strconv.Itoa(self) && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:i])
		}
	}
	return out
}
