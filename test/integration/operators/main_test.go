// Package operators_test runs workloads through the operators users submit
// them with, built from their own modules into bin/operators by
// `make operator-bins`, against a real control plane with gpuplane-scheduler
// in-process: no PodGroup is written by hand; the scheduler derives each
// gang from the workload the operator made.
package operators_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env       *framework.Env
	crdClient dynamic.Interface
)

func TestMain(m *testing.M) {
	cfg := localcluster.DefaultConfig()
	// The Workload API (scheduling.k8s.io/v1alpha2 PodGroup, pod
	// spec.schedulingGroup) is alpha in Kubernetes 1.36.
	cfg.ExtraAPIServerArgs = append(cfg.ExtraAPIServerArgs, "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true")
	os.Exit(framework.Main(m, cfg, &env))
}

var nodeSeq atomic.Int64

// cluster is one test's namespace, kwok GPU nodes and scheduler name.
type cluster struct {
	t         *testing.T
	ns        string
	scheduler string
	dyn       dynamic.Interface
}

func newCluster(t *testing.T, gpuNodes int) *cluster {
	t.Helper()
	if crdClient == nil {
		// Once per package run: the CRDs outlive each test.
		crdClient = env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	}
	dyn := crdClient
	ns := env.CreateNamespace(t)
	c := &cluster{t: t, ns: ns, scheduler: "gpuplane-" + ns, dyn: dyn}
	var nodes []*corev1.Node
	for range gpuNodes {
		nodes = append(nodes, framework.GPUNode(fmt.Sprintf("op-%d", nodeSeq.Add(1))).GPUs(8).Label("test-ns", ns).Obj())
	}
	if err := env.CreateNodes(t.Context(), nodes, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "test-ns="+ns); err != nil {
			t.Error(err)
		}
	})
	env.WaitNodesReady(t, "test-ns="+ns, gpuNodes, 60*time.Second)
	env.WaitNodesUntainted(t, "test-ns="+ns, 60*time.Second)
	return c
}

// runScheduler runs gpuplane-scheduler in-process for the test.
func (c *cluster) runScheduler() {
	framework.RunScheduler(c.t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond, PartialGangGrace: 2 * time.Second})
}

// podSpec is the pod template of a workload's GPU workers: this test's
// scheduler, its nodes, gpus GPUs each.
func (c *cluster) podSpec(gpus int) map[string]any {
	p := framework.Pod(c.ns, "x").SchedulerName(c.scheduler).GPUs(gpus).NodeSelector("test-ns", c.ns).Obj()
	tolerations := make([]any, 0, len(p.Spec.Tolerations))
	for _, tl := range p.Spec.Tolerations {
		tolerations = append(tolerations, map[string]any{"key": tl.Key, "operator": string(tl.Operator), "effect": string(tl.Effect)})
	}
	return map[string]any{
		"schedulerName": c.scheduler,
		"restartPolicy": "Never",
		"nodeSelector":  map[string]any{"test-ns": c.ns},
		"tolerations":   tolerations,
		"containers": []any{map[string]any{"name": "worker", "image": "trainer",
			"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": fmt.Sprint(gpus)}}}},
	}
}

// bound counts the pods matching selector that have a node, and all of
// them.
// waiting says why the first waiting pod matching selector waits (its
// PodScheduled condition), for failure messages.
func (c *cluster) waiting(ctx context.Context, selector string) string {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				return fmt.Sprintf("%s waits: %s: %s", p.Name, cond.Reason, cond.Message)
			}
		}
		return p.Name + " waits without a PodScheduled condition"
	}
	return "none waits"
}

func (c *cluster) bound(ctx context.Context, selector string) (int, int, error) {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n, len(list.Items), nil
}

// startOperator runs workload operator name (localcluster.Operator*) for
// the test (framework.Env.StartOperator).
func startOperator(t *testing.T, name string, args ...string) *localcluster.Operator {
	t.Helper()
	return env.StartOperator(t, name, args...)
}
