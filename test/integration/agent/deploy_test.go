package agent_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
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

// applyNamespace creates the agent's namespace for real: the server-side
// dry run of the namespaced objects needs it to exist.
func applyNamespace(t *testing.T) {
	t.Helper()
	if out, err := env.Kubectl("apply", "--server-side", "-f", filepath.Join(framework.RepoRoot(), "deploy", "agent", "00-namespace.yaml")); err != nil {
		t.Fatalf("kubectl apply of the namespace: %v\n%s", err, out)
	}
}

// TestManifestsPassServerDryRun sends every manifest in deploy/agent
// through the API server's validation and admission without persisting.
func TestManifestsPassServerDryRun(t *testing.T) {
	applyNamespace(t)
	out, err := env.Kubectl("apply", "--dry-run=server", "-f", filepath.Join(framework.RepoRoot(), "deploy", "agent"))
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f deploy/agent: %v\n%s", err, out)
	}
	for _, want := range []string{
		"namespace/gpuplane-system", "serviceaccount/gpuplane-agent", "clusterrole.rbac.authorization.k8s.io/gpuplane-agent",
		"clusterrolebinding.rbac.authorization.k8s.io/gpuplane-agent", "configmap/gpuplane-agent-config", "daemonset.apps/gpuplane-agent", "service/gpuplane-agent-metrics",
		"validatingadmissionpolicy.admissionregistration.k8s.io/gpuplane-agent-own-node",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/gpuplane-agent-own-node",
		"validatingadmissionpolicy.admissionregistration.k8s.io/gpuplane-agent-own-pods",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/gpuplane-agent-own-pods",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %s:\n%s", want, out)
		}
	}
}

// TestAgentRunsUnprivileged reads the DaemonSet back from the API server's
// dry run (its fields validated strictly) and holds its container to what
// a device plugin needs: not privileged, no capability, no escalation, the
// runtime's seccomp profile and a read-only root file system.
func TestAgentRunsUnprivileged(t *testing.T) {
	applyNamespace(t)
	out, err := env.Kubectl("apply", "--dry-run=server", "--validate=strict", "-o", "json", "-f", filepath.Join(framework.RepoRoot(), "deploy", "agent", "daemonset.yaml"))
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding the dry run's objects: %v", err)
	}
	var ds *appsv1.DaemonSet
	for _, raw := range list.Items {
		var o appsv1.DaemonSet
		if err := json.Unmarshal(raw, &o); err == nil && o.Kind == "DaemonSet" {
			ds = &o
		}
	}
	if ds == nil {
		t.Fatalf("no DaemonSet in the dry run's output:\n%s", out)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s has no securityContext", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s is privileged", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s may escalate privileges", c.Name)
		case sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || !slices.Contains(sc.Capabilities.Drop, "ALL"):
			t.Errorf("container %s capabilities %+v, want all dropped and none added", c.Name, sc.Capabilities)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("container %s seccomp %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s has a writable root file system", c.Name)
		}
	}
	if ds.Spec.Template.Spec.HostPID || ds.Spec.Template.Spec.HostNetwork || ds.Spec.Template.Spec.HostIPC {
		t.Error("the agent's pod shares a host namespace it does not need")
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

// boundTokenClient acts as the agent's ServiceAccount with a real token
// bound to a pod on node, as the kubelet would mount into the agent's pod:
// the API server itself puts the node's name into the token's user.
func boundTokenClient(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	no := false
	pod := framework.Pod(agentNamespace, "gpuplane-agent-"+node).NodeName(node).Obj()
	pod.Spec.ServiceAccountName = "gpuplane-agent"
	pod.Spec.AutomountServiceAccountToken = &no
	pod, err := env.Client.CoreV1().Pods(agentNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent's pod on %s: %v", node, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = env.Client.CoreV1().Pods(agentNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	expiry := int64(600)
	tr, err := env.Client.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, "gpuplane-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token bound to pod %s: %v", pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
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
	root := framework.RepoRoot()
	for _, f := range []string{"rbac.yaml", "policy.yaml"} {
		path := filepath.Join(root, "deploy", "agent", f)
		if out, err := env.Kubectl("apply", "--server-side", "-f", path); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
		t.Cleanup(func() {
			// The namespace stays: without a namespace controller, a
			// deleted namespace never finishes terminating.
			if out, err := env.Kubectl("delete", "--ignore-not-found", "-f", path, "--wait=false"); err != nil {
				t.Errorf("kubectl delete -f %s: %v\n%s", f, err, out)
			}
		})
	}
	for _, n := range []string{"policy-node-a", "policy-node-b"} {
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, framework.UnmanagedGPUNode(n).Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	labelPatch := []byte(`{"metadata":{"labels":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}}`)
	specPatch := []byte(`{"spec":{"unschedulable":true}}`)
	// Taints are replaced whole: the patches keep the ones the API server
	// put on the new Nodes (node.kubernetes.io/not-ready).
	withTaint := func(node string, key, value string) []byte {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		taints := append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule})
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	faultTaint := withTaint("policy-node-a", "gpuplane.io/gpu-fault", "xid-79")
	faultTaintB := withTaint("policy-node-b", "gpuplane.io/gpu-fault", "xid-79")
	otherTaint := withTaint("policy-node-a", "example.com/maintenance", "")
	condition := func(typ string) []byte {
		return []byte(`{"status":{"conditions":[{"type":"` + typ + `","status":"False","reason":"Test","message":"m"}]}}`)
	}
	capacityPatch := []byte(`{"status":{"capacity":{"nvidia.com/gpu":"80"}}}`)
	addressPatch := []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"203.0.113.7"}]}}`)
	// A real token bound to the agent's pod on node a, and impersonation
	// with what such a token carries (or a token that carries no node).
	bound := boundTokenClient(t, "policy-node-a")
	impersonated := func(node string) func(*testing.T) kubernetes.Interface {
		return func(t *testing.T) kubernetes.Interface { return agentClient(t, node) }
	}
	tests := []struct {
		name    string
		client  func(*testing.T) kubernetes.Interface
		target  string
		patch   []byte
		allowed bool
		status  bool // the patch is to the status subresource
	}{
		{"bound token: own node's GPUReady condition", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-a", condition("GPUReady"), true, true},
		{"bound token: another node's GPUReady condition", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-b", condition("GPUReady"), false, true},
		{"own node's Ready condition", impersonated("policy-node-a"), "policy-node-a", condition("Ready"), false, true},
		{"own node's GPU capacity", impersonated("policy-node-a"), "policy-node-a", capacityPatch, false, true},
		{"own node's addresses", impersonated("policy-node-a"), "policy-node-a", addressPatch, false, true},
		{"bound token: own node's labels", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-a", labelPatch, true, false},
		{"bound token: another node's labels", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-b", labelPatch, false, false},
		{"own node's labels", impersonated("policy-node-a"), "policy-node-a", labelPatch, true, false},
		{"another node's labels", impersonated("policy-node-a"), "policy-node-b", labelPatch, false, false},
		{"token without a node", impersonated(""), "policy-node-a", labelPatch, false, false},
		{"own node's spec", impersonated("policy-node-a"), "policy-node-a", specPatch, false, false},
		{"bound token: own node's GPUQuarantine condition", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-a", condition("GPUQuarantine"), true, true},
		{"bound token: own node's gpu-fault taint", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-a", faultTaint, true, false},
		{"bound token: another node's gpu-fault taint", func(*testing.T) kubernetes.Interface { return bound }, "policy-node-b", faultTaintB, false, false},
		{"own node's other taints", impersonated("policy-node-a"), "policy-node-a", otherTaint, false, false},
	}
	// Admission picks a new policy up asynchronously: wait until it denies
	// before checking what it allows. A denial must come from a validation
	// that evaluated to false, not from an expression that failed.
	denied := func(err error) bool {
		return (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
			strings.Contains(err.Error(), "gpuplane-agent-own-node") && !strings.Contains(err.Error(), "resulted in error")
	}
	other := agentClient(t, "policy-node-a")
	framework.Eventually(t, 30*time.Second, "the admission policy in force", func(ctx context.Context) (bool, error) {
		_, err := other.CoreV1().Nodes().Patch(ctx, "policy-node-b", types.StrategicMergePatchType, labelPatch, metav1.PatchOptions{})
		return denied(err), err
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sub []string
			if tc.status {
				sub = []string{"status"}
			}
			_, err := tc.client(t).CoreV1().Nodes().Patch(ctx, tc.target, types.StrategicMergePatchType, tc.patch, metav1.PatchOptions{FieldManager: "gpuplane-agent"}, sub...)
			switch {
			case tc.allowed && err != nil:
				t.Errorf("patch of %s denied: %v; want it allowed", tc.target, err)
			case !tc.allowed && err == nil:
				t.Errorf("patch of %s allowed; want the admission policy to deny it", tc.target)
			case !tc.allowed && !denied(err):
				t.Errorf("patch of %s failed with %v; want a denial by gpuplane-agent-own-node", tc.target, err)
			}
		})
	}
	// RBAC alone: the agent may not create or delete Nodes at all.
	if err := agentClient(t, "policy-node-a").CoreV1().Nodes().Delete(ctx, "policy-node-a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting its own Node: %v, want forbidden", err)
	}
	// It lists and watches the pods bound to its node, as the steering of
	// GPU choices does, and may not change any pod.
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=policy-node-a"}
	if l, err := bound.CoreV1().Pods("").List(ctx, onNode); err != nil {
		t.Errorf("listing the pods on its node: %v", err)
	} else if len(l.Items) != 1 {
		t.Errorf("listed %d pods on its node, want its own pod", len(l.Items))
	}
	w, err := bound.CoreV1().Pods("").Watch(ctx, onNode)
	if err != nil {
		t.Errorf("watching the pods on its node: %v", err)
	} else {
		w.Stop()
	}
	if err := bound.CoreV1().Pods(agentNamespace).Delete(ctx, "gpuplane-agent-policy-node-a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting a pod: %v, want forbidden", err)
	}
	// It records the GPUs a pod on its node holds, and changes nothing else
	// of any pod.
	onB := framework.Pod(agentNamespace, "on-node-b").NodeName("policy-node-b").Obj()
	no := false
	onB.Spec.ServiceAccountName, onB.Spec.AutomountServiceAccountToken = "gpuplane-agent", &no
	if _, err := env.Client.CoreV1().Pods(agentNamespace).Create(ctx, onB, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = env.Client.CoreV1().Pods(agentNamespace).Delete(context.Background(), onB.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	podPatch := func(key, value string) []byte {
		return []byte(`{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`)
	}
	framework.Eventually(t, 30*time.Second, "the pods' admission policy in force", func(ctx context.Context) (bool, error) {
		_, err := bound.CoreV1().Pods(agentNamespace).Patch(ctx, "on-node-b", types.MergePatchType, podPatch("gpuplane.io/gpus-held", "0"), metav1.PatchOptions{})
		return err != nil && strings.Contains(err.Error(), "gpuplane-agent-own-pods"), err
	})
	for _, tc := range []struct {
		name, pod string
		patch     []byte
		allowed   bool
	}{
		{"record on a pod of its node", "gpuplane-agent-policy-node-a", podPatch("gpuplane.io/gpus-held", "0,1"), true},
		{"another annotation", "gpuplane-agent-policy-node-a", podPatch("gpuplane.io/gpus", "7"), false},
		{"a label", "gpuplane-agent-policy-node-a", []byte(`{"metadata":{"labels":{"x":"y"}}}`), false},
		{"record on a pod of another node", "on-node-b", podPatch("gpuplane.io/gpus-held", "0"), false},
	} {
		_, err := bound.CoreV1().Pods(agentNamespace).Patch(ctx, tc.pod, types.MergePatchType, tc.patch, metav1.PatchOptions{})
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: %v, want allowed", tc.name, err)
		case !tc.allowed && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: %v, want denied by gpuplane-agent-own-pods", tc.name, err)
		case !tc.allowed && !strings.Contains(err.Error(), "gpuplane-agent-own-pods"):
			t.Errorf("%s: denied with %v, want gpuplane-agent-own-pods to say why", tc.name, err)
		}
	}
}
