package dev_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/gpupod"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/internal/cli/dev"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestChartOnDevCluster installs gpuplane with its own Helm chart into a
// dev cluster whose simulated nodes run the chart's pods as the chart
// writes them (entrypoint, args, env, hostPath volumes, the ConfigMap of
// configs, the bound ServiceAccount token, probes): a wrong flag, a
// missing permission or a broken probe keeps `dev up` from finishing. Then
// the chart schedules a pod, is upgraded (the agents roll to the new pod
// spec) and uninstalled, leaving none of its objects.
func TestChartOnDevCluster(t *testing.T) {
	stateDir, client := cluster(t, "--install", "chart", "--scheduler", "gpuplane", "--node-profiles", "dgxh100,dgxh100:mig-mixed")
	ctx := t.Context()
	ns := helmchart.DefaultNamespace

	t.Run("agents and scheduler run from the chart", func(t *testing.T) {
		agents := chartPods(t, client, "gpuplane-agent")
		if len(agents) != 2 {
			t.Fatalf("%d agent pods, want one per simulated node", len(agents))
		}
		for _, p := range agents {
			if !ready(p) || p.Status.ContainerStatuses[0].RestartCount != 0 || !strings.HasPrefix(p.Status.PodIP, "127.") {
				t.Errorf("agent pod %s on %s: ready %v, restarts %d, IP %s; want Ready, never restarted, on a loopback pod IP",
					p.Name, p.Spec.NodeName, ready(p), p.Status.ContainerStatuses[0].RestartCount, p.Status.PodIP)
			}
		}
		if s := chartPods(t, client, "gpuplane-scheduler"); len(s) != 1 || !ready(s[0]) {
			t.Errorf("scheduler pods %d, want one Ready", len(s))
		}
		// The MIG node's label picked the chart's mig-mixed config.
		n, err := client.CoreV1().Nodes().Get(ctx, "gpu-node-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if q := n.Status.Allocatable["nvidia.com/mig-1g.10gb"]; q.Value() != 7 {
			t.Errorf("gpu-node-2 offers %v nvidia.com/mig-1g.10gb, want 7 (config mig-mixed by its label)", q.String())
		}
	})

	t.Run("the chart's scheduler places and the chart's agent records", func(t *testing.T) {
		pod := framework.Pod("default", "by-chart").GPUs(2).SchedulerName("gpuplane-scheduler").Obj()
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "pod by-chart Running with the GPUs the scheduler chose recorded by the agent", func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().Pods("default").Get(ctx, "by-chart", metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning {
				return false, err
			}
			chosen := got.Annotations[gpupod.GPUsAnnotation]
			return chosen != "" && got.Annotations[gpupod.HeldAnnotation] == chosen, nil
		})
	})

	cfg, err := helmchart.ActionConfig(filepath.Join(stateDir, "kubeconfig"), ns, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("upgrade rolls the agents to the new pod spec", func(t *testing.T) {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.ReuseValues, up.Timeout = ns, true, 2*time.Minute
		if _, err := up.RunWithContext(ctx, dev.ChartRelease, c, map[string]any{"agent": map[string]any{"labels": map[string]any{"interval": "30s"}}}); err != nil {
			t.Fatalf("helm upgrade: %v", err)
		}
		framework.Eventually(t, 2*time.Minute, "every agent pod Ready with --labels-interval=30s", func(context.Context) (bool, error) {
			agents := chartPods(t, client, "gpuplane-agent")
			if len(agents) != 2 {
				return false, nil
			}
			for _, p := range agents {
				if !ready(p) || !slices.Contains(p.Spec.Containers[0].Args, "--labels-interval=30s") {
					return false, nil
				}
			}
			return true, nil
		})
		// The workload kept running on the GPUs it had.
		got, err := client.CoreV1().Pods("default").Get(ctx, "by-chart", metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning || got.Annotations[gpupod.HeldAnnotation] != got.Annotations[gpupod.GPUsAnnotation] {
			t.Errorf("after the upgrade pod by-chart is %v (err %v), want Running on the GPUs it held", got.Status.Phase, err)
		}
	})

	t.Run("uninstall leaves none of its objects", func(t *testing.T) {
		un := action.NewUninstall(cfg)
		un.Wait, un.Timeout = true, 2*time.Minute
		if _, err := un.Run(dev.ChartRelease); err != nil {
			t.Fatalf("helm uninstall: %v", err)
		}
		framework.Eventually(t, 2*time.Minute, "no gpuplane pods, workloads or RBAC left", func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=gpuplane"})
			if err != nil || len(pods.Items) > 0 {
				return false, err
			}
			roles, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=gpuplane"})
			if err != nil || len(roles.Items) > 0 {
				return false, err
			}
			ds, err := client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(ds.Items) == 0, err
		})
	})
}

func chartPods(t *testing.T, client kubernetes.Interface, name string) []*corev1.Pod {
	t.Helper()
	list, err := client.CoreV1().Pods(helmchart.DefaultNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

func ready(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}
