package prometheus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// schedulerDashboardQueries returns every PromQL expression of the
// scheduler's dashboard, with its queue variable set to match everything.
func schedulerDashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "deploy", "monitoring", "scheduler-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("parsing the scheduler dashboard: %v", err)
	}
	out := map[string]string{}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("%s/%d", p.Title, i)] = strings.ReplaceAll(tg.Expr, "$queue", ".*")
		}
	}
	if len(out) < 20 {
		t.Fatalf("the scheduler dashboard has only %d queries", len(out))
	}
	return out
}

// schedulerRuleExprs returns each alert rule's expression by alert name.
func schedulerRuleExprs(t *testing.T) map[string]string {
	t.Helper()
	rules := readYAML(t, filepath.Join(framework.RepoRoot(), "deploy", "monitoring", "scheduler-alerts.rules.yaml"))
	out := map[string]string{}
	groups, _ := rules["groups"].([]any)
	for _, g := range groups {
		rs, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rs {
			m, _ := r.(map[string]any)
			name, _ := m["alert"].(string)
			expr, _ := m["expr"].(string)
			out[name] = expr
		}
	}
	if len(out) != 5 {
		t.Fatalf("%d scheduler alert rules, want 5: %v", len(out), out)
	}
	return out
}

func createObj(t *testing.T, d dynamic.Interface, gvr schema.GroupVersionResource, namespace string, obj kruntime.Object) {
	t.Helper()
	u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Resource(gvr).Namespace(namespace).Create(t.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s: %v", gvr.Resource, err)
	}
}

// A real Prometheus scrapes a real gpuplane-scheduler on a real control
// plane (etcd, kube-apiserver, kube-controller-manager, kwok) that binds,
// reclaims a queue's guarantee by eviction and leaves a gang waiting: every
// panel of the scheduler's dashboard shows data, and every alert rule's
// expression runs on the series the scheduler serves.
func TestPrometheusScrapesScheduler(t *testing.T) {
	tool(t, "prometheus")
	cp := framework.StartControlPlane(t, localcluster.DefaultConfig())
	env, err := framework.NewEnv(cp)
	if err != nil {
		t.Fatal(err)
	}
	d := env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	ns := env.CreateNamespace(t)
	if err := env.CreateNodes(t.Context(), []*corev1.Node{framework.GPUNode("gpu-0").GPUs(8).Obj()}, 1); err != nil {
		t.Fatal(err)
	}
	env.WaitNodesReady(t, "", 1, 60*time.Second)
	env.WaitNodesUntainted(t, "", 60*time.Second)

	// Queue owner is guaranteed 4 GPUs and lends them to borrower while
	// it has no work.
	queue := func(name, parent string, guaranteed int64) {
		r := v1alpha1.QueueResource{Name: string(framework.ResourceGPU), Weight: 1}
		if guaranteed > 0 {
			r.Guaranteed = resource.NewQuantity(guaranteed, resource.DecimalSI)
		}
		createObj(t, d, v1alpha1.QueuesResource, "", &v1alpha1.Queue{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Queue"},
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{Parent: parent, Resources: []v1alpha1.QueueResource{r}}})
	}
	queue("root", "", 0)
	queue("owner", "root", 4)
	queue("borrower", "root", 0)

	addr := framework.FreeLoopbackAddr(t)
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, ServeAddr: addr})
	prom := startPrometheus(t, addr)

	pods := func(q, prefix string, n, gpus int) {
		for i := range n {
			p := framework.Pod(ns, fmt.Sprintf("%s-%d", prefix, i)).SchedulerName(v1alpha1.SchedulerName).GPUs(gpus).Label(v1alpha1.QueueLabel, q).Obj()
			if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pods("borrower", "borrowed", 8, 1)
	prom.eventually(t, "the borrower's pods bound", `gpuplane_scheduler_binds_total{result="bound"} >= 8`, count(1))
	pods("owner", "owned", 4, 1)
	prom.eventually(t, "the owner's guarantee reclaimed", `gpuplane_scheduler_evictions_total{reason="reclaim",result="evicted"} >= 4`, count(1))
	prom.eventually(t, "the owner's pods bound", `gpuplane_scheduler_queue_usage{queue="owner",resource="nvidia.com/gpu"} == 4`, count(1))
	// A gang of two 8-GPU pods can never fit the one 8-GPU node.
	createObj(t, d, v1alpha1.PodGroupsResource, ns, build.PodGroup(ns, "big", 2).Queue("owner").Obj())
	for i := range 2 {
		p := framework.Pod(ns, fmt.Sprint("big-", i)).SchedulerName(v1alpha1.SchedulerName).GPUs(8).Label(v1alpha1.PodGroupLabel, "big").Obj()
		if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prom.eventually(t, "the gang waits", `gpuplane_scheduler_pending_groups{queue="owner",reason="ExceedsClusterCapacity"} == 1`, count(1))
	prom.eventually(t, "the gang's age", `time() - gpuplane_scheduler_queue_oldest_pending_gang_timestamp_seconds{queue="owner"} > 0`, count(1))
	prom.eventually(t, "the owner's guarantee", `gpuplane_scheduler_queue_guaranteed{queue="owner",resource="nvidia.com/gpu"} == 4`, count(1))
	// Rates need two scrapes of every counter after the last change.
	prom.eventually(t, "cycle rate", `rate(gpuplane_scheduler_cycle_duration_seconds_count[5m]) > 0`, count(1))

	t.Run("dashboard", func(t *testing.T) {
		for name, q := range schedulerDashboardQueries(t) {
			t.Run(name, func(t *testing.T) {
				prom.eventually(t, name, q, func(s []sample) error {
					if len(s) == 0 {
						return fmt.Errorf("no data")
					}
					return nil
				})
			})
		}
	})

	t.Run("alert rules", func(t *testing.T) {
		exprs := schedulerRuleExprs(t)
		// Every expression runs on the real series (an error fails the
		// query); the leader and the queue below its guarantee are
		// healthy here, so those say nothing.
		for _, q := range exprs {
			prom.query(t, q)
		}
		for _, name := range []string{"GPUPlaneSchedulerNoLeader", "GPUPlaneSchedulerAbsent", "GPUPlaneQueueBelowGuarantee"} {
			if got := prom.query(t, exprs[name]); len(got) != 0 {
				t.Errorf("%s: %v, want nothing from a leading scheduler whose queues hold their guarantees", name, got)
			}
		}
		// The gang rule, at a threshold the test's gang has passed, names
		// the owner's queue: its label matching fits the served series.
		gang := strings.Replace(exprs["GPUPlaneGangPending"], "> 1800", "> 0", 1)
		got := prom.query(t, gang)
		if len(got) != 1 || got[0].Labels["queue"] != "owner" {
			t.Errorf("%s = %v, want the owner's queue", gang, got)
		}
		// The storm rule, with no threshold, sums the served evictions
		// into one series for the scheduler's job.
		storm := strings.Replace(exprs["GPUPlanePreemptionStorm"], "> 20", ">= 0", 1)
		if got := prom.query(t, storm); len(got) != 1 || got[0].Labels["job"] != "gpuplane" {
			t.Errorf("%s = %v, want one series for job gpuplane", storm, got)
		}
	})
}
