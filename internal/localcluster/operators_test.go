package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestOperatorsAreTheBuiltOnes(t *testing.T) {
	// hack/build-operators.sh builds these names; dev up's --operators
	// and the integration tests name them.
	if got, want := Operators(), []string{OperatorJobSet, OperatorKubeRay, OperatorLWS, OperatorTraining}; !slices.Equal(got, want) {
		t.Errorf("Operators() = %v, want %v", got, want)
	}
}

func TestVerifyOperator(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("kuberay", 0o755)
	write("kuberay-crds/ray.io_rayclusters.yaml", 0o644)
	write("training-operator", 0o755) // no CRDs
	write("jobset", 0o644)            // not executable
	write("jobset-crds/jobset.x-k8s.io_jobsets.yaml", 0o644)
	for _, tc := range []struct {
		name    string
		wantErr error
	}{
		{OperatorKubeRay, nil},
		{OperatorTraining, ErrBinaryMissing},
		{OperatorJobSet, ErrBinaryMissing},
		{"volcano", ErrUnknownOperator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyOperator(dir, tc.name)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("VerifyOperator(%s) = %v, want %v", tc.name, err, tc.wantErr)
			}
		})
	}
}

func TestServingCertIsALoopbackKeyPair(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := servingCert(dir); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatalf("the written pair does not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("certificate not valid for 127.0.0.1: %v", err)
	}
}

func TestKubeRayRecipeKeepsItsServersOnLoopback(t *testing.T) {
	run := &operatorRun{cfg: OperatorConfig{Kubeconfig: "/k"}, probeAddr: "127.0.0.1:1234"}
	args, env, err := kubeRayRecipe(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--kubeconfig", "/k", "--metrics-addr=0", "--health-probe-bind-address=127.0.0.1:1234", "--enable-leader-election=false"}
	if !slices.Equal(args, want) || len(env) != 0 {
		t.Errorf("args %v env %v, want %v and none", args, env, want)
	}
}
