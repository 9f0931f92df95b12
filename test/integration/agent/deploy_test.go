package agent_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const (
	agentNamespace = "gpuplane-system"
	agentUser      = "system:serviceaccount:" + agentNamespace + ":gpuplane-agent"
	// nodeNameExtra is where a bound ServiceAccount token carries the node
	// of the pod it was issued for.
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// kubectl runs the control plane's kubectl against the admin kubeconfig.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args = append([]string{"--kubeconfig", env.ControlPlane.Kubeconfig()}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(env.ControlPlane.BinDir(), "kubectl"), args...).CombinedOutput()
	return string(out), err
}

// applyNamespace creates the agent's namespace for real: the server-side
// dry run of the namespaced objects needs it to exist.
func applyNamespace(t *testing.T) {
	t.Helper()
	if out, err := kubectl(t, "apply", "--server-side", "-f", filepath.Join(repoRoot(t), "deploy", "agent", "00-namespace.yaml")); err != nil {
		t.Fatalf("kubectl apply of the namespace: %v\n%s", err, out)
	}
}

// TestManifestsPassServerDryRun sends every manifest in deploy/agent
// through the API server's validation and admission without persisting.
func TestManifestsPassServerDryRun(t *testing.T) {
	applyNamespace(t)
	out, err := kubectl(t, "apply", "--dry-run=server", "-f", filepath.Join(repoRoot(t), "deploy", "agent"))
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f deploy/agent: %v\n%s", err, out)
	}
	for _, want := range []string{
		"namespace/gpuplane-system", "serviceaccount/gpuplane-agent", "clusterrole.rbac.authorization.k8s.io/gpuplane-agent",
		"clusterrolebinding.rbac.authorization.k8s.io/gpuplane-agent", "configmap/gpuplane-agent-config", "daemonset.apps/gpuplane-agent",
		"validatingadmissionpolicy.admissionregistration.k8s.io/gpuplane-agent-own-node",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/gpuplane-agent-own-node",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %s:\n%s", want, out)
		}
	}
}

// agentClient acts as the agent's ServiceAccount, by impersonation, with
// the node name a token bound to a pod on node carries (none when node is
// empty).
func agentClient(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: agentUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgentMayPatchOnlyItsOwnNode applies the RBAC and the admission
// policy for real and patches Nodes as the agent's ServiceAccount.
func TestAgentMayPatchOnlyItsOwnNode(t *testing.T) {
	ctx := t.Context()
	applyNamespace(t)
	root := repoRoot(t)
	for _, f := range []string{"rbac.yaml", "policy.yaml"} {
		if out, err := kubectl(t, "apply", "--server-side", "-f", filepath.Join(root, "deploy", "agent", f)); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
	}
	for _, n := range []string{"policy-node-a", "policy-node-b"} {
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, framework.GPUNode(n).NotKwok().Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	labelPatch := []byte(`{"metadata":{"labels":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}}`)
	specPatch := []byte(`{"spec":{"unschedulable":true}}`)
	tests := []struct {
		name      string
		tokenNode string
		target    string
		patch     []byte
		allowed   bool
	}{
		{"own node's labels", "policy-node-a", "policy-node-a", labelPatch, true},
		{"another node's labels", "policy-node-a", "policy-node-b", labelPatch, false},
		{"token without a node", "", "policy-node-a", labelPatch, false},
		{"own node's spec", "policy-node-a", "policy-node-a", specPatch, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := agentClient(t, tc.tokenNode)
			// The policy is enforced once the API server's admission has
			// loaded it: poll until the first decision is the expected one.
			framework.Eventually(t, 30*time.Second, "the admission decision", func(ctx context.Context) (bool, error) {
				_, err := c.CoreV1().Nodes().Patch(ctx, tc.target, types.StrategicMergePatchType, tc.patch, metav1.PatchOptions{FieldManager: "gpuplane-agent"})
				switch {
				case tc.allowed && err == nil:
					return true, nil
				case !tc.allowed && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "gpuplane-agent-own-node"):
					return true, nil
				case err == nil:
					return false, errors.New("patch allowed, want it denied")
				default:
					return false, err
				}
			})
		})
	}
	// RBAC alone: the agent may not create or delete Nodes at all.
	if err := agentClient(t, "policy-node-a").CoreV1().Nodes().Delete(ctx, "policy-node-a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting its own Node: %v, want forbidden", err)
	}
}
