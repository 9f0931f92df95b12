// Package agent_test checks gpuplane-agent against a real API server: the
// built agent process labels its Node and annotates its GPU topology,
// following device-plugin config reloads, and waits out an unreachable API
// server without stopping; the deployment manifests in
// deploy/agent pass the API server's validation; and their admission
// policy lets the agent's ServiceAccount patch only its own Node.
package agent_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env *framework.Env
	// binDir receives the built agent; TestMain removes it.
	binDir string
)

// etcd and kube-apiserver are all these tests need.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpuplane-agent-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := framework.Main(m, localcluster.Config{}, &env)
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

var agentBinary = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return framework.BuildCommand(ctx, binDir, "gpuplane-agent")
})

// buildAgent builds cmd/gpuplane-agent once per test binary.
func buildAgent(t testing.TB) string {
	t.Helper()
	bin, err := agentBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
