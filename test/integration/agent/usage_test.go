package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpuplane/gpuplane/internal/agent"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestPodOverItsGPUMemoryLimit runs the agent's usage watch against a real
// API server: a pod that asked for 20 GiB of a time-sliced GPU and whose
// process uses 30 GiB gets a Warning event at once; under the evict policy
// the Eviction API refuses while a PodDisruptionBudget protects the pod
// (said on the pod), then evicts it once the budget is gone. A pod without
// a memory limit using as much is left alone.
func TestPodOverItsGPUMemoryLimit(t *testing.T) {
	ctx := t.Context()
	const node = "usage-node"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "usage-"}}
	ns, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if _, err := env.Client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	create := func(name string, limited bool) *corev1.Pod {
		b := framework.Pod(ns.Name, name).NodeName(node).GPUs(1).Label("app", name)
		if limited {
			b = b.Annotation("gpuplane.io/gpu-memory", "20Gi")
		}
		p := b.Obj()
		p.Spec.AutomountServiceAccountToken = &no
		p, err := env.Client.CoreV1().Pods(ns.Name).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Running and Ready, as the kubelet would say: the Eviction API
		// lets pending pods go whatever their budget.
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if p, err = env.Client.CoreV1().Pods(ns.Name).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	frac, whole := create("frac", true), create("whole", false)
	// Both keep the budget from letting one go: no disruption controller
	// runs here, so it allows none.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "keep-frac"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "frac"}}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns.Name).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The node: their processes on GPU 2 (frac: 30 GiB) and GPU 3 (whole:
	// 70 GiB), each pod holding one replica of its GPU.
	n := metricstest.NewNode(t, "dgxh100", node)
	devs := n.Devices(t)
	n.AddPod(t, metricstest.Pod{Namespace: ns.Name, Name: "frac", Container: "main", UID: string(frac.UID), Resource: "nvidia.com/gpu",
		DeviceID: devs[2].UUID + "::0", GPU: 2, PID: 5001, MemMiB: 30720, Util: 50})
	n.AddPod(t, metricstest.Pod{Namespace: ns.Name, Name: "whole", Container: "main", UID: string(whole.UID), Resource: "nvidia.com/gpu",
		DeviceID: devs[3].UUID, GPU: 3, PID: 5002, MemMiB: 71680, Util: 50})
	n.WriteCheckpoint(t)
	log := slog.New(slog.DiscardHandler)
	e, err := metrics.NewExporter(metrics.Options{GPUs: n.Backend, PodResources: &metricstest.StaticLister{Resp: n.Response()},
		ProcRoot: n.ProcRoot, CheckpointPath: n.CheckpointPath, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- agent.RunUsageWatch(wctx, agent.UsageWatchOptions{Config: env.Config, Node: node, Usage: e.Usage,
			Policy: agent.OverLimitEvict, Grace: time.Second, Interval: 200 * time.Millisecond, Backoff: time.Second, Logger: log})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("usage watch: %v", err)
		}
	})

	events := func(pod, reason string) []corev1.Event {
		list, err := env.Client.CoreV1().Events(ns.Name).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	framework.Eventually(t, 30*time.Second, "the over-limit event on frac", func(context.Context) (bool, error) {
		evs := events("frac", agent.ReasonGPUMemoryOverLimit)
		return len(evs) == 1 && strings.Contains(evs[0].Message, "uses 30720 MiB of GPU 2") && strings.Contains(evs[0].Message, "20480 MiB it asked for"),
			fmt.Errorf("events %v", evs)
	})
	framework.Eventually(t, 30*time.Second, "the refused eviction said on frac", func(context.Context) (bool, error) {
		evs := events("frac", agent.ReasonEvictionRefused)

		return len(evs) > 0 && strings.Contains(evs[0].Message, "disruption budget"), fmt.Errorf("events %v", evs)
	})
	if err := env.Client.PolicyV1().PodDisruptionBudgets(ns.Name).Delete(ctx, pdb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "frac evicted once its budget is gone", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns.Name).Get(ctx, "frac", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return p.DeletionTimestamp != nil, fmt.Errorf("frac is not being deleted")
	})
	// Events are recorded asynchronously: the eviction's may land just
	// after the pod's deletion.
	framework.Eventually(t, 10*time.Second, "the eviction event on frac", func(context.Context) (bool, error) {
		evs := events("frac", agent.ReasonEvictedOverLimit)
		return len(evs) == 1, fmt.Errorf("eviction events on frac: %v, want one", evs)
	})
	p, err := env.Client.CoreV1().Pods(ns.Name).Get(ctx, "whole", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Errorf("whole, which asked for no memory limit: %v (deleting: %v), want it left alone", err, p != nil && p.DeletionTimestamp != nil)
	}
	if evs := events("whole", agent.ReasonGPUMemoryOverLimit); len(evs) != 0 {
		t.Errorf("over-limit events on whole, which has no limit: %v", evs)
	}
}

func ptrTo[T any](v T) *T { return &v }
