package karpenter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// withholdGPUs makes the nodes of the test's pool register without their
// nvidia.com/gpu, as a node does while its device plugin is still
// starting: a MutatingAdmissionPolicy takes the resource out of the
// status every node of the pool is created with (Karpenter's kwok
// provider creates the Node with its instance type's resources). The test
// registers them later, as the kubelet would (registerGPUs).
func (c *cluster) withholdGPUs() {
	c.t.Helper()
	name := "withhold-gpus-" + c.ns
	failClosed := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      &failClosed,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"karpenter.sh/nodepool": "gpu-h100x8"}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}},
				}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "offers-gpus",
				Expression: `has(object.status) && has(object.status.capacity) && has(object.status.allocatable) && 'nvidia.com/gpu' in object.status.capacity && 'nvidia.com/gpu' in object.status.allocatable`}},
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
				Expression: `[JSONPatch{op: "remove", path: "/status/capacity/nvidia.com~1gpu"}, JSONPatch{op: "remove", path: "/status/allocatable/nvidia.com~1gpu"}]`,
			}}},
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	ctx := c.t.Context()
	ar := env.Client.AdmissionregistrationV1()
	if _, err := ar.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	if _, err := ar.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		_ = ar.MutatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = ar.MutatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The API server takes the policy up a moment later: a node created
	// in a dry run shows when it does.
	probe := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + c.ns, Labels: map[string]string{"karpenter.sh/nodepool": "gpu-h100x8"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
		},
	}
	framework.Eventually(c.t, time.Minute, "the policy withholding GPUs in force", func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		_, has := n.Status.Allocatable["nvidia.com/gpu"]
		return !has, fmt.Errorf("a node of the pool is still created with its GPUs")
	})
}

// registerGPUs gives node the GPUs of the pool's instance type, as the
// kubelet does once the device plugin has registered them.
func (c *cluster) registerGPUs(node string) {
	c.t.Helper()
	n := fmt.Sprint(c.gpusPerNode)
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{"nvidia.com/gpu": n},
		"allocatable": map[string]string{"nvidia.com/gpu": n},
	}})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Nodes().Patch(c.t.Context(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		c.t.Fatal(err)
	}
}

// TestComingNodesBuyNothingMore: a gang's nodes register without their
// GPUs, which come a while later. Meanwhile the gang's pods wait for
// those nodes (NodesComing, not Unschedulable), nothing is bound to
// them, and Karpenter buys no node beyond the two the gang needs; once the
// GPUs register, the gang is bound to the nodes bought for it.
func TestComingNodesBuyNothingMore(t *testing.T) {
	c := newCluster(t, options{idle: time.Minute})
	c.withholdGPUs()
	const members = 2
	c.gang("late", members, members, c.gpusPerNode, "")
	most := 0
	framework.Eventually(t, 3*time.Minute, "the gang waiting for its nodes to register their GPUs", c.waitingForComing("late", members, &most))
	nodes, err := c.nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		c.registerGPUs(n.Name)
	}
	framework.Eventually(t, 2*time.Minute, "the gang running on the nodes bought for it", c.gangRunningOnNewNodes("late", members, &most))
	if most != members {
		t.Errorf("Karpenter had up to %d NodeClaims for a gang that needs %d nodes", most, members)
	}
	if bought, err := c.nodes(t.Context()); err != nil || len(bought) != members {
		t.Errorf("Karpenter bought %d nodes (%v), want %d", len(bought), err, members)
	}
}

// scheduledReason is the reason of p's PodScheduled condition.
func scheduledReason(p *corev1.Pod) string {
	for _, cd := range p.Status.Conditions {
		if cd.Type == corev1.PodScheduled {
			return cd.Reason
		}
	}
	return ""
}

// waitingForComing is a Condition: want nodes of the pool are up without
// their GPUs (each with the offer its pool gives it), and the want pods
// of gang wait for them, unbound, saying NodesComing; *most records the
// most NodeClaims seen.
func (c *cluster) waitingForComing(gang string, want int, most *int) framework.Condition {
	return func(ctx context.Context) (bool, error) {
		claims, err := c.claims(ctx)
		if err != nil {
			return false, err
		}
		*most = max(*most, len(claims))
		nodes, err := c.nodes(ctx)
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range nodes {
			if _, has := n.Status.Allocatable["nvidia.com/gpu"]; has {
				return false, fmt.Errorf("node %s registered with its GPUs: the policy withholding them is not in force", n.Name)
			}
			if n.Annotations[gpunode.OfferAnnotation] != "nvidia.com/gpu=8" {
				return false, fmt.Errorf("node %s lacks the offer annotation its pool gives it: %v", n.Name, n.Annotations)
			}
			if framework.NodeReady(&n) {
				ready++
			}
		}
		if ready < want {
			return false, fmt.Errorf("%d of %d nodes ready", ready, len(nodes))
		}
		pods, err := c.pods(ctx, "gang="+gang)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("%s bound to %s before its GPUs registered", p.Name, p.Spec.NodeName)
			}
			if why := scheduledReason(&p); why != model.UnplacedNodesComing {
				return false, fmt.Errorf("%s says %q (%s), want %s", p.Name, why, framework.SchedulerSays(&p), model.UnplacedNodesComing)
			}
		}
		return len(pods) == want, fmt.Errorf("%d pods", len(pods))
	}
}
