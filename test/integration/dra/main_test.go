// Package dra_test runs gpuplane-agent as a DRA driver on simulated nodes
// against a real control plane: kube-apiserver serving resource.k8s.io/v1,
// kube-controller-manager creating claims from templates, and the real
// kube-scheduler allocating them from the agent's ResourceSlices. The node
// simulator plays the kubelet's DRA part (plugin registration,
// NodePrepareResources / NodeUnprepareResources) against the real agent
// process.
package dra_test

import (
	"context"
	"fmt"
	"os"
	"testing"

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
	dir, err := os.MkdirTemp("", "dra-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if agentBinary, err = framework.BuildCommand(context.Background(), dir, "gpuplane-agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return framework.Main(m, localcluster.Config{ControllerManager: true, Scheduler: true}, &env)
}
