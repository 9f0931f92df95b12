// Package smoke_test checks that the shared control plane does what every
// other integration test relies on: namespaces get their default
// ServiceAccount, kwok GPU nodes become Ready, and pods bound to them run.
package smoke_test

import (
	"os"
	"testing"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env))
}
