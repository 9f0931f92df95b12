package schedulerscale_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

var pyTorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// BenchmarkPyTorchJobGangs is BenchmarkJobGangs with the workload issue
// #15 names: a PyTorchJob of 8 workers x 8 GPUs (a master and 7 workers,
// torchrun's 8 nodes) submitted as users write it to Kubeflow's training
// operator, which runs as a process of its own (built into bin/operators by
// `make operator-bins`) and makes the pods, one by one, as it does in a
// cluster. Under gpuplane-scheduler the gang is derived from the PyTorchJob
// (the shipped rule sums its replica specs: 8); under kube-scheduler the
// pods are placed one by one. The same rounds and metrics:
//
//   - jobs=1: ms-to-all-bound, from the PyTorchJob's creation to its eighth
//     pod bound (the operator's reconcile and pod creation included);
//   - jobs=2/free-nodes=12: two such PyTorchJobs at once with 12 nodes
//     schedulable: bound-a, bound-b and deadlocked (both partly bound).
//
// Run with:
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkPyTorchJobGangs -benchtime 1x -count 5 -timeout 60m ./test/integration/schedulerscale/
func BenchmarkPyTorchJobGangs(b *testing.B) {
	nodes := envInt("GPUPLANE_BENCH_JOB_NODES", 100)
	label := fmt.Sprintf("ptj-%d", nodes)
	gangNodes(b, label, nodes)
	// The operator runs only its PyTorchJob controller, like a cluster
	// that uses it for PyTorch alone; it serves every round.
	op, err := localcluster.StartOperator(b.Context(), localcluster.OperatorConfig{
		Name: localcluster.OperatorTraining, Dir: localcluster.OperatorsDir(env.ControlPlane.BinDir()),
		RESTConfig: env.Config, Kubeconfig: env.ControlPlane.Kubeconfig(), WorkDir: b.TempDir(),
		Args: []string{"--enable-scheme=pytorchjob"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := op.Stop(context.Background(), 10*time.Second); err != nil {
			b.Error(err)
		}
		if b.Failed() {
			if out, err := os.ReadFile(op.LogPath()); err == nil {
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				b.Logf("last lines of the training operator:\n%s", strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	runGangRounds(b, label, nodes, func(ctx context.Context, ns, name, schedName, label string) error {
		return submitPyTorchJob(ctx, dyn, ns, name, schedName, label)
	})
}

// submitPyTorchJob creates a PyTorchJob of a master and gangPods-1
// workers, each pod as gangPodSpec makes it (its container named pytorch,
// as the operator wants).
func submitPyTorchJob(ctx context.Context, dyn dynamic.Interface, ns, name, schedName, label string) error {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(new(gangPodSpec(schedName, label, "pytorch")))
	if err != nil {
		return err
	}
	replica := func(n int64) map[string]any {
		return map[string]any{"replicas": n, "restartPolicy": "Never",
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{gangLabel: name}}, "spec": spec}}
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Master": replica(1),
			"Worker": replica(gangPods - 1),
		}},
	}}
	_, err = dyn.Resource(pyTorchJobs).Namespace(ns).Create(ctx, job, metav1.CreateOptions{})
	return err
}
