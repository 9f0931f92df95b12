package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestMIGBothSchedulersSeeNewDevices re-partitions GPU 3 of a dev
// cluster's MIG node through its nvidia.com/mig.config label (a config
// added to the ConfigMap dev up creates, as an operator adds one): both
// kube-scheduler and gpuplane-scheduler then place a pod asking for the new
// nvidia.com/mig-3g.40gb devices on it, and the node gives each one.
func TestMIGBothSchedulersSeeNewDevices(t *testing.T) {
	_, client := cluster(t, "--node-profiles", "dgxh100:mig-mixed", "--scheduler", "gpuplane")
	const node, res = "gpu-node-1", "nvidia.com/mig-3g.40gb"
	ctx := t.Context()
	cm, err := client.CoreV1().ConfigMaps(helmchart.DefaultNamespace).Get(ctx, helmchart.MIGConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dev up's MIG ConfigMap: %v", err)
	}
	// mig-configs is the file's last key: a config appended belongs to it.
	cm.Data[helmchart.MIGConfigKey] += "  gpu3-3g:\n    - devices: [3]\n      mig-enabled: true\n      mig-devices:\n        \"3g.40gb\": 2\n"
	if _, err := client.CoreV1().ConfigMaps(helmchart.DefaultNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{gpunode.LabelMIGConfig: "gpu3-3g"}}})
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The mig-mixed node starts with two 3g.40gb devices on GPU 1.
	framework.Eventually(t, 90*time.Second, node+" re-partitioned with 4 "+res, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := n.Status.Allocatable[corev1.ResourceName(res)]
		st := n.Labels[gpunode.LabelMIGConfigState]
		return st == gpunode.MIGConfigStateSuccess && q.Value() == 4, fmt.Errorf("state %q, %s allocatable %s", st, res, q.String())
	})
	for _, p := range []struct{ name, scheduler string }{{"by-default", ""}, {"by-gpuplane", "gpuplane-scheduler"}} {
		t.Run(p.name, func(t *testing.T) {
			// Two pods of two: together they need all four devices, the
			// two GPU 1 had and the two GPU 3 has now.
			b := framework.Pod("default", p.name).Limit(corev1.ResourceName(res), "2")
			if p.scheduler != "" {
				b = b.SchedulerName(p.scheduler)
			}
			if _, err := client.CoreV1().Pods("default").Create(ctx, b.Obj(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 90*time.Second, "pod "+p.name+" Running with two "+res, func(ctx context.Context) (bool, error) {
				got, err := client.CoreV1().Pods("default").Get(ctx, p.name, metav1.GetOptions{})
				if err != nil || got.Status.Phase != corev1.PodRunning {
					return false, fmt.Errorf("phase %v: %v", got.Status.Phase, err)
				}
				a, err := gpupod.ReadAllocation(got)
				if err != nil || a == nil {
					return false, err
				}
				ids := a.DeviceIDs(res)
				return len(ids) == 2 && strings.HasPrefix(ids[0], "MIG-"), fmt.Errorf("devices %v", ids)
			})
		})
	}
}
