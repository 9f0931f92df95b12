package operators_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var jobSets = framework.JobSets

// startJobSet runs the JobSet controller (sigs.k8s.io/jobset, pinned in
// tools/operators/jobset) with its CRD installed. Its webhooks are not
// registered with the API server: the controller runs as it does behind
// them, and the JobSets here set every field a webhook would default. It
// returns its webhook server's port and certificate directory, for a test
// whose JobSets another operator writes to register the defaulting webhook
// (framework.Env.RegisterMutatingWebhooks).
func startJobSet(t *testing.T) (int, string) {
	t.Helper()
	return startOperator(t, localcluster.OperatorJobSet).Webhook()
}

// jobSet creates a JobSet of one replicated Job: replicas Jobs of workers
// pods each, gpus GPUs per pod.
func (c *cluster) jobSet(name string, replicas, workers int64, gpus int) {
	c.t.Helper()
	tmpl := map[string]any{"metadata": map[string]any{"labels": map[string]any{"js": name}}, "spec": c.podSpec(gpus)}
	js := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			// What JobSet's defaulting webhook would set.
			"successPolicy": map[string]any{"operator": "All"},
			"startupPolicy": map[string]any{"startupPolicyOrder": "AnyOrder"},
			"network":       map[string]any{"enableDNSHostnames": true, "publishNotReadyAddresses": true},
			"replicatedJobs": []any{map[string]any{
				"name": "workers", "replicas": replicas,
				"template": map[string]any{"spec": map[string]any{
					"parallelism": workers, "completions": workers, "backoffLimit": int64(0),
					"completionMode": "Indexed", "template": tmpl,
				}},
			}},
		},
	}}
	if _, err := c.dyn.Resource(jobSets).Namespace(c.ns).Create(c.t.Context(), js, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating JobSet %s: %v", name, err)
	}
}

// A JobSet submitted through the JobSet controller, with no PodGroup
// written, is gang-scheduled across all its Jobs: one that fits runs whole,
// one that cannot never starts a pod.
func TestJobSetIsOneGang(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	startJobSet(t)
	c.runScheduler()
	c.jobSet("fits", 2, 2, 4)    // 4 pods x 4 GPUs
	c.jobSet("too-big", 3, 2, 4) // 6 pods x 4 GPUs
	framework.Eventually(t, 90*time.Second, "JobSet fits bound whole", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "js=fits")
		return err == nil && n == 4, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
	var groups []string
	framework.Eventually(t, 30*time.Second, "the JobSets' derived PodGroups", func(ctx context.Context) (bool, error) {
		list, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.DerivedLabel + "=true"})
		if err != nil {
			return false, err
		}
		groups = groups[:0]
		for _, u := range list.Items {
			mm, _, _ := unstructured.NestedInt64(u.Object, "spec", "minMember")
			groups = append(groups, fmt.Sprintf("%s=%d", u.GetName()[:strings.LastIndex(u.GetName(), "-")], mm))
		}
		return len(groups) == 2, fmt.Errorf("groups %v", groups)
	})
	for _, want := range []string{"jobset-fits=4", "jobset-too-big=6"} {
		if !strings.Contains(strings.Join(groups, " "), want) {
			t.Errorf("derived groups %v, want %s: one gang per JobSet over all its Jobs", groups, want)
		}
	}
	// The too-big JobSet's six pods exist and none is ever bound.
	for range 10 {
		n, total, err := c.bound(t.Context(), "js=too-big")
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d of too-big's %d pods bound: a gang of 6 x 4 GPUs cannot fit 16 GPUs", n, total)
		}
		time.Sleep(300 * time.Millisecond)
	}
	framework.Eventually(t, 60*time.Second, "too-big's six pods made, none bound", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, "js=too-big")
		if n > 0 {
			t.Fatalf("%d of too-big's pods bound", n)
		}
		return err == nil && total == 6, fmt.Errorf("%d pods (%w)", total, err)
	})
}
