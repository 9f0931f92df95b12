package framework

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// RequireEnv names the environment variable that turns missing control-plane
// binaries from a skipped package into a failed one. `make test-integration`
// sets it, so that tier can never pass without running.
const RequireEnv = "GPUPLANE_INTEGRATION"

// Env is the control plane shared by the tests of one package.
type Env struct {
	ControlPlane *localcluster.ControlPlane
	// Config is an admin client configuration with high rate limits.
	Config *rest.Config
	// Client is an admin clientset built from Config.
	Client kubernetes.Interface
}

// Main starts a control plane with cfg, stores it in *env, runs the
// package's tests and stops the control plane. Call it from TestMain:
//
//	var env *framework.Env
//
//	func TestMain(m *testing.M) { os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env)) }
//
// With -short, or when the binaries are missing and GPUPLANE_INTEGRATION is
// not 1, the package is skipped with a message saying how to run it.
func Main(m *testing.M, cfg localcluster.Config, env **Env) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping integration tests: -short")
		return 0
	}
	if cfg.Logger == nil && testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := localcluster.Start(ctx, cfg)
	if err != nil {
		if errors.Is(err, localcluster.ErrBinaryMissing) && os.Getenv(RequireEnv) != "1" {
			fmt.Printf("skipping integration tests: %v\n", err)
			return 0
		}
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	code := run(m, cp, env)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stopCancel()
	if err := cp.Stop(stopCtx); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func run(m *testing.M, cp *localcluster.ControlPlane, env **Env) int {
	e, err := NewEnv(cp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := cp.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "a control-plane component died during the tests: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// NewEnv wraps a running control plane with admin clients.
func NewEnv(cp *localcluster.ControlPlane) (*Env, error) {
	cfg := cp.RESTConfig()
	// Built-in types travel as protobuf: listing a thousand nodes while
	// polling costs a fraction of the JSON.
	typed := rest.CopyConfig(cfg)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return nil, fmt.Errorf("creating a client for the control plane: %w", err)
	}
	return &Env{ControlPlane: cp, Config: cfg, Client: client}, nil
}

// StartControlPlane starts a control plane of the test's own (for tests of
// start-up and shutdown themselves) and stops it when the test ends. Missing
// binaries skip the test unless GPUPLANE_INTEGRATION=1.
func StartControlPlane(t testing.TB, cfg localcluster.Config) *localcluster.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: -short")
	}
	cp, err := localcluster.Start(t.Context(), cfg)
	if errors.Is(err, localcluster.ErrBinaryMissing) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("integration test: %v", err)
	}
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(context.Background()); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return cp
}

// RequireBinaries skips the test when cfg's binaries are missing, or fails
// it when GPUPLANE_INTEGRATION=1.
func RequireBinaries(t testing.TB, cfg localcluster.Config) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: -short")
	}
	if _, err := localcluster.VerifyBinaries(cfg); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skipf("integration test: %v", err)
	}
}
