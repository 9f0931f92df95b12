package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// productAffinity requires nodes whose nvidia.com/gpu.product is one of
// products, as the seeds' examples select GPU models.
func productAffinity(products ...string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: build.LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: products}},
		}}},
	}}
}

func TestTaintsTolerationsAndGPUProductAffinity(t *testing.T) {
	const (
		h100 = "NVIDIA-H100-80GB-HBM3"
		a100 = "NVIDIA-A100-SXM4-80GB"
	)
	h := gpuNodes(1, "h100")[0].Taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule)
	// Only the A100 node has an RDMA device to offer.
	a := gpuNodes(1, "a100")[0].Product(a100, 81920).Resource("rdma/ib", "1")
	hName, aName := h.Obj().Name, a.Obj().Name
	c := newCluster(t, h, a)
	c.run(adapter.Config{})

	gpuToleration := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	withAffinity := func(b *framework.PodBuilder, aff *corev1.Affinity, tols ...corev1.Toleration) *corev1.Pod {
		p := b.Obj()
		p.Spec.Affinity = aff
		p.Spec.Tolerations = append(p.Spec.Tolerations, tols...)
		return p
	}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		wantNode string
		wantWhy  string
	}{
		{"A100 affinity lands on the A100 node", withAffinity(c.pod("want-a100").GPUs(2), productAffinity(a100)), aName, ""},
		{"H100 affinity with the toleration lands on the tainted node", withAffinity(c.pod("want-h100").GPUs(2), productAffinity(h100), gpuToleration), hName, ""},
		{"H100 affinity without the toleration waits and says why", withAffinity(c.pod("no-toleration").GPUs(1), productAffinity(h100)), "", "untolerated taint {nvidia.com/gpu: present}"},
		{"an unknown product waits and says why", withAffinity(c.pod("no-such-gpu").GPUs(1), productAffinity("NVIDIA-B300")), "", "node affinity/selector mismatch"},
		{"an RDMA device leads to the node that has one", withAffinity(c.pod("want-rdma").GPUs(1).Limit("rdma/ib", "1"), nil, gpuToleration), aName, ""},
		{"more RDMA devices than any node has waits and says why", withAffinity(c.pod("too-much-rdma").GPUs(1).Limit("rdma/ib", "2"), nil, gpuToleration), "", "2 insufficient rdma/ib"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.createPod(tc.pod)
			name := tc.pod.Name
			if tc.wantNode == "" {
				c.waitCondition(name, corev1.PodReasonUnschedulable, tc.wantWhy, 30*time.Second)
				return
			}
			framework.Eventually(t, 30*time.Second, "pod "+name+" bound to "+tc.wantNode, func(ctx context.Context) (bool, error) {
				p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if p.Spec.NodeName != "" && p.Spec.NodeName != tc.wantNode {
					t.Fatalf("pod bound to %s, want %s", p.Spec.NodeName, tc.wantNode)
				}
				return p.Spec.NodeName == tc.wantNode, fmt.Errorf("node %q", p.Spec.NodeName)
			})
		})
	}
}

func TestBadInputIsReportedAndBlocksNothingElse(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "bad")...)
	c.podGroup("too-big", 4, "")
	// The API server itself refuses fractional or unequal extended
	// resources; the scheduler's own check stays for pods that reach it
	// some other way.
	for name, p := range map[string]*corev1.Pod{
		"fractional":          c.pod("fractional").Limit(framework.ResourceGPU, "500m").Obj(),
		"request below limit": c.pod("unequal").Limit(framework.ResourceGPU, "2").Request(framework.ResourceGPU, "1").Obj(),
	} {
		if _, err := env.Client.CoreV1().Pods(c.ns).Create(t.Context(), p, metav1.CreateOptions{}); err == nil {
			t.Errorf("%s: the API server accepted a pod asking for %v", name, p.Spec.Containers[0].Resources)
		}
	}
	c.create(
		c.pod("unknown-queue").GPUs(1).Label(v1alpha1.QueueLabel, "no-such-queue"),
		c.pod("lonely-member").GPUs(1).Label(v1alpha1.PodGroupLabel, "too-big"),
		c.pod("no-group").GPUs(1).Label(v1alpha1.PodGroupLabel, "missing"),
		c.pod("good").GPUs(1),
	)
	c.run(adapter.Config{})
	tests := []struct{ pod, reason, want string }{
		{"unknown-queue", "UnknownQueue", `queue "no-such-queue" does not exist`},
		{"lonely-member", "NotEnoughPods", "needs minMember 4 pods but has 1"},
		{"no-group", "PodGroupNotFound", "does not exist: create the PodGroup"},
	}
	for _, tc := range tests {
		t.Run(tc.pod, func(t *testing.T) {
			c.waitCondition(tc.pod, tc.reason, tc.want, 30*time.Second)
		})
	}
	t.Run("a good pod still runs", func(t *testing.T) {
		env.WaitPodPhase(t, c.ns, "good", corev1.PodRunning, 30*time.Second)
	})
	t.Run("the PodGroup says why it waits", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "PodGroup too-big condition", func(ctx context.Context) (bool, error) {
			pg, err := c.getPodGroup(ctx, "too-big")
			if err != nil {
				return false, err
			}
			for _, cd := range pg.Status.Conditions {
				if cd.Type == v1alpha1.ConditionSchedulable && cd.Reason == "NotEnoughPods" {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %v", pg.Status.Conditions)
		})
	})
}
