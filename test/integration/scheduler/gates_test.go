package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/deploy/admission"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	mapResource        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
	mapBindingResource = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"}
)

// gatePolicy installs gpuplane's scheduling-gate admission policy as
// deploy/admission ships it, for this test's scheduler name (and under
// names of its own), and waits until the API server enforces it.
func (c *cluster) gatePolicy() {
	c.t.Helper()
	data, err := admission.Files.ReadFile("scheduling-gate.yaml")
	if err != nil {
		c.t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), `"`+v1alpha1.SchedulerName+`"`, `"`+c.scheduler+`"`)
	text = strings.ReplaceAll(text, "gpuplane-scheduling-gate", "gpuplane-scheduling-gate-"+c.ns)
	for doc := range strings.SplitSeq(text, "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			c.t.Fatal(err)
		}
		gvr := mapResource
		if u.GetKind() == "MutatingAdmissionPolicyBinding" {
			gvr = mapBindingResource
		}
		if _, err := c.dyn.Resource(gvr).Create(c.t.Context(), &u, metav1.CreateOptions{}); err != nil {
			c.t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		c.t.Cleanup(func() {
			if err := c.dyn.Resource(gvr).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil {
				c.t.Errorf("deleting %s: %v", u.GetName(), err)
			}
		})
	}
	// The API server picks policies up from a watch: a dry run shows when.
	framework.Eventually(c.t, 30*time.Second, "the scheduling gate policy enforced", func(ctx context.Context) (bool, error) {
		got, err := env.Client.CoreV1().Pods(c.ns).Create(ctx, c.pod("probe").Obj(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return gatedByUs(got), errors.New("a dry-run pod was created without the gate")
	})
}

func gatedByUs(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.SchedulingGate })
}

// waitGated waits until the pod says PodScheduled=False with reason and a
// message containing want while gpuplane's gate still holds it.
func (c *cluster) waitGated(pod, reason, want string) {
	c.t.Helper()
	c.waitCondition(pod, reason, want, 30*time.Second)
	p, err := env.Client.CoreV1().Pods(c.ns).Get(c.t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if !gatedByUs(p) {
		c.t.Fatalf("pod %s waits for %s without its gate: an autoscaler may buy a node for it", pod, reason)
	}
}

// waitReleased waits until the pod's gate is lifted and it says
// Unschedulable with a message containing want.
func (c *cluster) waitReleased(pod, want string) {
	c.t.Helper()
	c.waitCondition(pod, corev1.PodReasonUnschedulable, want, 30*time.Second)
	p, err := env.Client.CoreV1().Pods(c.ns).Get(c.t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if len(p.Spec.SchedulingGates) != 0 {
		c.t.Fatalf("pod %s is Unschedulable with gates %v", pod, p.Spec.SchedulingGates)
	}
}

// Pods are gated when created; only a pod that more nodes would start is
// released and called Unschedulable. One its queue's quota holds back, or
// whose gang is missing a member, keeps its gate (and counts in its gang)
// and is bound once the reason is gone; a restarted scheduler sorts the
// gates out from the core's answer alone.
func TestSchedulingGates(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "gates")...)
	c.gatePolicy()
	capped := "capped-" + c.ns
	c.queue(capped, "", 0, 2)
	c.alwaysPods("no pod is Unschedulable while gated", "", func(ps map[string]*corev1.Pod) error {
		for _, p := range ps {
			if !gatedByUs(p) {
				continue
			}
			for _, cd := range p.Status.Conditions {
				if cd.Type == corev1.PodScheduled && cd.Reason == corev1.PodReasonUnschedulable {
					return fmt.Errorf("pod %s is Unschedulable with gpuplane's gate on", p.Name)
				}
			}
		}
		return nil
	})
	stop := c.run(adapter.Config{})

	t.Run("a quota-blocked pod stays gated and is bound when the quota frees", func(t *testing.T) {
		c.create(c.pod("first").GPUs(2).Label(v1alpha1.QueueLabel, capped).Label("quota", "y"))
		c.waitBound("quota=y", 1, 30*time.Second)
		c.create(c.pod("second").GPUs(1).Label(v1alpha1.QueueLabel, capped).Label("quota", "y"))
		c.waitGated("second", "QueueLimit", fmt.Sprintf("queue %q is at its limit", capped))
		if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), "first", deleteNow()); err != nil {
			t.Fatal(err)
		}
		c.waitBound("quota=y", 1, 30*time.Second)
		p, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), "second", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			t.Fatalf("second: %v, want it bound once first is gone", err)
		}
	})

	t.Run("a gang missing a member stays gated, counted, and is bound whole when it arrives", func(t *testing.T) {
		c.podGroup("train", 3, "")
		for i := range 2 {
			c.create(c.pod(fmt.Sprint("train-", i)).GPUs(1).Label(v1alpha1.PodGroupLabel, "train").Label("gang", "train"))
		}
		c.waitGated("train-0", "NotEnoughPods", "needs minMember 3 pods but has 2")
		c.waitGated("train-1", "NotEnoughPods", "needs minMember 3 pods but has 2")
		c.create(c.pod("train-2").GPUs(1).Label(v1alpha1.PodGroupLabel, "train").Label("gang", "train"))
		c.waitBound("gang=train", 3, 30*time.Second)
	})

	t.Run("a capacity-short pod is released and Unschedulable", func(t *testing.T) {
		c.create(c.pod("huge").GPUs(16).Label("huge", "y"))
		c.waitReleased("huge", "insufficient nvidia.com/gpu")
	})

	t.Run("a restarted scheduler releases the capacity-short and keeps the rest", func(t *testing.T) {
		stop()
		// The queue is full again (second holds 1 of its 2 GPUs).
		c.create(c.pod("third").GPUs(1).Label(v1alpha1.QueueLabel, capped))
		c.create(c.pod("blocked").GPUs(1).Label(v1alpha1.QueueLabel, capped))
		c.create(c.pod("huge-2").GPUs(16))
		for _, n := range []string{"third", "blocked", "huge-2"} {
			p, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !gatedByUs(p) {
				t.Fatalf("pod %s created without gpuplane's gate: %v", n, p.Spec.SchedulingGates)
			}
		}
		c.run(adapter.Config{})
		c.waitReleased("huge-2", "insufficient nvidia.com/gpu")
		c.waitBound("quota=y", 1, 30*time.Second)
		framework.Eventually(t, 30*time.Second, "one of third and blocked bound, the other gated at the quota", func(ctx context.Context) (bool, error) {
			c.failIfBroken()
			var bound, held []string
			for _, n := range []string{"third", "blocked"} {
				p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				switch says := framework.SchedulerSays(p); {
				case p.Spec.NodeName != "":
					bound = append(bound, n)
				case gatedByUs(p) && strings.Contains(says, "QueueLimit"):
					held = append(held, n)
				}
			}
			return len(bound) == 1 && len(held) == 1, fmt.Errorf("bound %v, gated at the quota %v", bound, held)
		})
	})
}
