// Package quarantine_test fails GPUs of the real gpuplane-agent running on
// simulated DGX H100 nodes (internal/nodesim) against a real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, and checks the
// quarantine end to end: the Node's taint and condition, eviction of only
// the failed GPU's pods (the others keep their devices, as the kubelet's
// PodResources API shows), the reset, revalidation and the lifting; a GPU
// whose reset fails stays quarantined and says why; kube-scheduler and
// gpuplane-scheduler place nothing on the tainted node until it is lifted.
package quarantine_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env *framework.Env
	// agentBinary is gpuplane-agent built from this checkout for the run.
	agentBinary string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "quarantine-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if agentBinary, err = framework.BuildCommand(ctx, dir, "gpuplane-agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return framework.Main(m, localcluster.Config{ControllerManager: true, Scheduler: true}, &env)
}
