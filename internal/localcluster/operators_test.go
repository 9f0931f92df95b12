package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestOperatorsAreTheBuiltOnes(t *testing.T) {
	// hack/build-operators.sh builds these names; dev up's --operators
	// and the integration tests name them.
	if got, want := Operators(), []string{OperatorJobSet, OperatorKarpenter, OperatorKubeRay, OperatorLWS, OperatorTraining}; !slices.Equal(got, want) {
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

func TestRestartEarlyExits(t *testing.T) {
	ready := &Operator{name: "op"}
	exited := &operatorExitedError{name: "op", err: errors.New("exit status 1")}
	notReady := errors.New("operator op not ready within 2m0s")
	tests := []struct {
		name      string
		results   []error // one per attempt; nil is a ready operator
		wantTries int
		wantErr   error
		wantKept  []string
	}{
		{name: "ready at once", results: []error{nil}, wantTries: 1},
		{name: "an early exit is started again", results: []error{exited, nil}, wantTries: 2, wantKept: []string{"op.attempt-1.log"}},
		{name: "gives up after the allowed attempts", results: []error{exited, exited, exited, nil}, wantTries: portAttempts, wantErr: exited,
			wantKept: []string{"op.attempt-1.log", "op.attempt-2.log"}},
		{name: "a timeout is not retried", results: []error{notReady, nil}, wantTries: 1, wantErr: notReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "op.log")
			tries := 0
			op, err := restartEarlyExits(t.Context(), "op", logPath, func() (*Operator, error) {
				tries++
				if err := os.WriteFile(logPath, []byte("attempt "+strconv.Itoa(tries)), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := tc.results[tries-1]; err != nil {
					return nil, err
				}
				return ready, nil
			})
			if tries != tc.wantTries {
				t.Errorf("launched %d times, want %d", tries, tc.wantTries)
			}
			if tc.wantErr == nil && (err != nil || op != ready) {
				t.Fatalf("restartEarlyExits = %v, %v; want the ready operator", op, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("restartEarlyExits error = %v, want %v", err, tc.wantErr)
			}
			for i, name := range tc.wantKept {
				b, rerr := os.ReadFile(filepath.Join(dir, name))
				if rerr != nil {
					t.Fatalf("failed attempt's log not kept: %v", rerr)
				}
				if want := "attempt " + strconv.Itoa(i+1); string(b) != want {
					t.Errorf("%s holds %q, want %q", name, b, want)
				}
				if tc.wantErr != nil && !strings.Contains(err.Error(), name) {
					t.Errorf("error does not name the kept log %s: %v", name, err)
				}
			}
		})
	}
}
