package scheduler_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/adapter"
)

const schedulerUser = "system:serviceaccount:gpuplane-system:gpuplane-scheduler"

// TestDeployManifests checks deploy/scheduler twice: every object passes
// the API server's validation and admission (server-side dry run), and the
// RBAC it grants is enough to schedule: the scheduler runs as its
// ServiceAccount (by impersonation), elects itself on its Lease, binds a
// gang, explains a waiting pod and writes PodGroup status.
func TestDeployManifests(t *testing.T) {
	dir := filepath.Join(repoRoot(), "deploy", "scheduler")
	for _, f := range []string{"00-namespace.yaml", "rbac.yaml"} {
		if out, err := env.Kubectl("apply", "--server-side", "-f", filepath.Join(dir, f)); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
	}
	out, err := env.Kubectl("apply", "--dry-run=server", "-f", dir)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f deploy/scheduler: %v\n%s", err, out)
	}
	for _, want := range []string{"namespace/gpuplane-system", "serviceaccount/gpuplane-scheduler", "clusterrole.rbac.authorization.k8s.io/gpuplane-scheduler",
		"clusterrolebinding.rbac.authorization.k8s.io/gpuplane-scheduler", "role.rbac.authorization.k8s.io/gpuplane-scheduler-leader",
		"rolebinding.rbac.authorization.k8s.io/gpuplane-scheduler-leader", "deployment.apps/gpuplane-scheduler", "service/gpuplane-scheduler-metrics"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %s:\n%s", want, out)
		}
	}

	c := newCluster(t, gpuNodes(1, "rbac")...)
	asScheduler := rest.CopyConfig(env.Config)
	asScheduler.Impersonate = rest.ImpersonationConfig{UserName: schedulerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:gpuplane-system", "system:authenticated"}}
	c.run(adapter.Config{RESTConfig: asScheduler, LeaseName: "rbac-" + c.ns, LeaseNamespace: "gpuplane-system", Identity: "rbac-test",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond})
	c.gang("fits", 2, 2, 4)
	c.create(c.pod("too-big").GPUs(16))
	c.waitBound("gang=fits", 2, 30*time.Second)
	c.waitCondition("too-big", corev1.PodReasonUnschedulable, "insufficient nvidia.com/gpu", 30*time.Second)
	pollPodGroupPhase(t, c, "fits", v1alpha1.PodGroupRunning)
}
