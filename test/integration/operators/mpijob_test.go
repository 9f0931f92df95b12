package operators_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var mpiJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "mpijobs"}

// mpiJob creates an MPIJob of a launcher (no GPU) and workers workers of
// gpus GPUs each.
func (c *cluster) mpiJob(name string, workers int64, gpus int) {
	c.t.Helper()
	replica := func(n int64, gpus int) map[string]any {
		spec := c.podSpec(max(gpus, 1))
		if gpus == 0 {
			delete(spec["containers"].([]any)[0].(map[string]any), "resources")
		}
		return map[string]any{"replicas": n, "restartPolicy": "Never",
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"mpi": name}}, "spec": spec}}
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{"slotsPerWorker": int64(1), "mpiReplicaSpecs": map[string]any{
			"Launcher": replica(1, 0),
			"Worker":   replica(workers, gpus),
		}},
	}}
	if _, err := c.dyn.Resource(mpiJobs).Namespace(c.ns).Create(c.t.Context(), job, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating MPIJob %s: %v", name, err)
	}
}

// An MPIJob through the training operator is one gang of its launcher and
// workers: one that cannot fit starts neither (a launcher alone waits for
// workers that never come).
func TestMPIJobIsOneGang(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	startTrainingOperator(t)
	c.runScheduler()
	c.mpiJob("fits", 3, 4)
	framework.Eventually(t, 90*time.Second, "MPIJob fits bound whole", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "mpi=fits")
		if err != nil {
			return false, err
		}
		return n == 4, fmt.Errorf("%d of %d bound; %s", n, total, c.waiting(ctx, "mpi=fits"))
	})
	c.mpiJob("waits", 3, 4)
	framework.Eventually(t, 60*time.Second, "MPIJob waits's pods made", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "mpi=waits")
		if n > 0 {
			t.Fatalf("%d of waits's pods bound while it cannot run whole", n)
		}
		return err == nil && total == 4, fmt.Errorf("%d pods (%w)", total, err)
	})
	for range 10 {
		if n, _, err := c.bound(t.Context(), "mpi=waits"); err != nil || n != 0 {
			t.Fatalf("%d of waits's pods bound (%v): its launcher must not start without its workers", n, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
