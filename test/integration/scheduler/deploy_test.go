package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const schedulerUser = "system:serviceaccount:gpuplane-system:gpuplane-scheduler"

// TestDeployManifests checks deploy/scheduler twice: every object passes
// the API server's validation and admission (server-side dry run), and the
// RBAC it grants is enough to schedule: the scheduler runs as its
// ServiceAccount (by impersonation), elects itself on its Lease, binds a
// gang, explains a waiting pod and writes PodGroup status.
func TestDeployManifests(t *testing.T) {
	dir := filepath.Join(framework.RepoRoot(), "deploy", "scheduler")
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
		"rolebinding.rbac.authorization.k8s.io/gpuplane-scheduler-leader", "deployment.apps/gpuplane-scheduler", "service/gpuplane-scheduler-metrics",
		"validatingadmissionpolicy.admissionregistration.k8s.io/gpuplane-scheduler-mig-proposals",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/gpuplane-scheduler-mig-proposals"} {
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

// TestSchedulerMayPatchOnlyMIGProposals applies the scheduler's RBAC and
// admission policy for real and patches Nodes as its ServiceAccount: the
// gpuplane.io/mig-proposal annotation on a node that follows demand, and
// its removal anywhere, pass; anything else is denied by the policy.
func TestSchedulerMayPatchOnlyMIGProposals(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(framework.RepoRoot(), "deploy", "scheduler")
	for _, f := range []string{"00-namespace.yaml", "rbac.yaml", "policy.yaml"} {
		if out, err := env.Kubectl("apply", "--server-side", "-f", filepath.Join(dir, f)); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := env.Kubectl("delete", "--ignore-not-found", "-f", filepath.Join(dir, "policy.yaml"), "--wait=false"); err != nil {
			t.Errorf("kubectl delete -f policy.yaml: %v\n%s", err, out)
		}
	})
	follows, other := "proposal-follows", "proposal-other"
	for name, labels := range map[string]map[string]string{follows: {gpunode.LabelMIGLayoutPolicy: gpunode.MIGLayoutFollowDemand}, other: nil} {
		n := framework.UnmanagedGPUNode(name).Obj()
		for k, v := range labels {
			n.Labels[k] = v
		}
		n.Annotations = map[string]string{gpunode.MIGProposalAnnotation: "old", "example.com/keep": "x"}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	asScheduler := rest.CopyConfig(env.Config)
	asScheduler.Impersonate = rest.ImpersonationConfig{UserName: schedulerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:gpuplane-system", "system:authenticated"}}
	client, err := kubernetes.NewForConfig(asScheduler)
	if err != nil {
		t.Fatal(err)
	}
	annotation := func(k string, v any) []byte {
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: v}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	denied := func(err error) bool {
		return (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
			strings.Contains(err.Error(), "gpuplane-scheduler-mig-proposals") && !strings.Contains(err.Error(), "resulted in error")
	}
	// A probe that changes another annotation each time (an allowed
	// one, before the policy is in force, would make the next a no-op)
	// tells when the policy denies.
	probe := 0
	framework.Eventually(t, 30*time.Second, "the admission policy in force", func(ctx context.Context) (bool, error) {
		probe++
		_, err := client.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, annotation("example.com/probe", fmt.Sprint(probe)), metav1.PatchOptions{})
		return denied(err), err
	})
	tests := []struct {
		name    string
		node    string
		patch   []byte
		allowed bool
	}{
		{"a proposal on a node that follows demand", follows, annotation(gpunode.MIGProposalAnnotation, "new"), true},
		{"a proposal on a node that does not", other, annotation(gpunode.MIGProposalAnnotation, "new"), false},
		{"removing a proposal from any node", other, annotation(gpunode.MIGProposalAnnotation, nil), true},
		{"another annotation", follows, annotation("example.com/keep", "changed"), false},
		{"removing another annotation", follows, annotation("example.com/keep", nil), false},
		{"a label", follows, []byte(`{"metadata":{"labels":{"nvidia.com/mig.config":"all-1g.10gb"}}}`), false},
		{"the spec", follows, []byte(`{"spec":{"unschedulable":true}}`), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.CoreV1().Nodes().Patch(ctx, tc.node, types.MergePatchType, tc.patch, metav1.PatchOptions{FieldManager: "gpuplane-scheduler"})
			switch {
			case tc.allowed && err != nil:
				t.Errorf("patch of %s denied: %v; want it allowed", tc.node, err)
			case !tc.allowed && err == nil:
				t.Errorf("patch of %s allowed; want the admission policy to deny it", tc.node)
			case !tc.allowed && !denied(err):
				t.Errorf("patch of %s failed with %v; want a denial by gpuplane-scheduler-mig-proposals", tc.node, err)
			}
		})
	}
}
